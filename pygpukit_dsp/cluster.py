"""Placement of a file's pipelines on Ray actors: ``gk-stream run FILE --cluster ray``.

Orchestration only (nothing here is on the per-block path): every pipeline of a multi-pipeline
file becomes one Ray actor, which runs it in a :class:`~pygpukit_dsp.session.Session` of its own,
on whichever node Ray places it. Pipelines are joined by logical zmq endpoints,
``cluster://NAME`` (one side binds, ``bind: true``; the others connect):

1. the driver reads the file, finds each link's binding pipeline and its connecting ones, and
   orders the pipelines in waves: a pipeline starts once every link it connects to is bound;
2. each actor resolves ``cluster://NAME`` with :class:`ClusterResolver`: a binding socket binds
   ``tcp://NODE_IP:*`` (a port the OS picks on the actor's node) and the actor reports the
   address it got (the component's ``endpoint_bound``); a connecting socket connects to the
   address the driver handed it before it started;
3. the driver collects every actor's summaries (``RunSummary.to_dict()``) and prints one report,
   with the node, host and GPU each pipeline ran on and why it asked for what it asked.

Resources: an actor asks for ``num_cpus`` (default 0.5, so that two pipelines fit on 2 CPUs) and
one whole GPU when its backend is ``cuda``; for ``backend: auto`` it asks for a GPU only when the
cluster has one (else it runs on the CPU). A whole GPU, never a fraction: each process has its own
scheduler and admission, which see only their own streams, so two actors on one GPU would be
admitted without knowing of each other.

Files named in the YAML (sources, sinks) resolve against the YAML's folder as usual, in the
actor's process: on one machine they are the same files; on several hosts the YAML and those
paths must exist at the same place on every node (a shared file system), and outputs are
written on the node that ran the pipeline.

Ray is an optional extra: ``pip install 'pygpukit-dsp[cluster]'``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, GkError, StreamFault
from .io import endpoints
from .summary import RunSummary, SchedulerAccounting

DEFAULT_CPUS = 0.5
PLACE_TIMEOUT_S = 120.0   # an actor Ray cannot place (or that does not open) within this is an error
STOP_GRACE_S = 30.0       # after a stop, how long actors may drain before they are killed


# ----------------------------------------------------------------------------- ray itself


def import_ray() -> Any:
    """The ray module, or a ConfigError naming the extra."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--cluster ray needs the ray package, which is not installed ({exc})",
                          hint="install it with: pip install 'pygpukit-dsp[cluster]'") from None
    return ray


def init_ray(ray: Any, target: str) -> str:
    """Start or join Ray for ``--cluster TARGET``; returns how (for the report).

    ``ray``: ``ray.init()`` (joins the cluster in RAY_ADDRESS or one started with ``ray start``
    on this machine, else starts a local instance that ends with this run); ``auto``: join the
    running cluster (an error if there is none); ``ray://HOST:PORT``: Ray Client to that cluster.
    """
    import logging

    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if target == "ray":
        address = None
        kwargs["include_dashboard"] = False
    elif target == "auto" or target.startswith("ray://"):
        address = target
    else:
        raise ConfigError(f"--cluster {target!r}: expected 'ray', 'auto' or 'ray://HOST:PORT'")
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"--cluster {target}: cannot start or join Ray: {exc}",
                          hint="'ray' starts a local instance; 'auto' and 'ray://' need a running cluster "
                               "(ray start --head)") from None
    return "local instance" if address is None else f"cluster at {address}"


# ----------------------------------------------------------------------------- links and order


@dataclass
class Link:
    """One ``cluster://NAME`` link: the pipeline whose socket binds it, and those that connect."""

    name: str
    binder: str | None = None
    connectors: list[str] = field(default_factory=list)


def pipeline_links(pipeline: Any) -> tuple[list[str], list[str]]:
    """The links a pipeline binds and the ones it connects to (its zmq source and sink)."""
    binds: list[str] = []
    connects: list[str] = []
    for comp in (pipeline.source, pipeline.sink):
        params = getattr(comp, "params", None)
        if getattr(comp, "type", None) != "zmq" or params is None:
            continue
        name = endpoints.link_name(params.endpoint)
        if name is not None:
            (binds if params.bind else connects).append(name)
    return binds, connects


def plan_links(pipelines: list[Any]) -> dict[str, Link]:
    """Every link of the file, checked: one binder each, and every connected link bound."""
    links: dict[str, Link] = {}
    for p in pipelines:
        binds, connects = pipeline_links(p)
        for name in binds:
            link = links.setdefault(name, Link(name))
            if link.binder is not None:
                raise ConfigError(f"cluster link '{name}' is bound by two pipelines, '{link.binder}' and "
                                  f"'{p.name}'", where=p.where,
                                  hint="exactly one side of a link binds (bind: true); the others connect")
            link.binder = p.name
        for name in connects:
            links.setdefault(name, Link(name)).connectors.append(p.name)
    for link in links.values():
        if link.binder is None:
            raise ConfigError(f"cluster link '{link.name}' is connected to by "
                              f"{', '.join(repr(c) for c in link.connectors)} but no pipeline of the file binds it",
                              hint=f"give one side 'endpoint: cluster://{link.name}' with 'bind: true'")
    return links


def start_order(pipelines: list[Any], links: dict[str, Link]) -> list[list[str]]:
    """Waves of pipeline names: each pipeline starts once every link it connects to is bound."""
    needs = {p.name: set(pipeline_links(p)[1]) for p in pipelines}
    bound: set[str] = set()
    done: set[str] = set()
    waves: list[list[str]] = []
    while len(done) < len(needs):
        wave = [n for n in needs if n not in done and needs[n] <= bound]
        if not wave:
            stuck = [n for n in needs if n not in done]
            raise ConfigError(f"the pipelines {', '.join(repr(n) for n in stuck)} connect to each other's links in "
                              "a cycle: none can start before another has bound its socket",
                              hint="let one of them bind the link it now connects to")
        waves.append(wave)
        done.update(wave)
        bound.update(name for name, link in links.items() if link.binder in wave)
    return waves


def resources_for(backend: str, cluster_gpus: float, num_cpus: float) -> tuple[float, int, str]:
    """(num_cpus, num_gpus, why) an actor asks Ray for, given the pipeline's backend."""
    if backend == "cuda":
        if cluster_gpus < 1:
            raise ConfigError("a pipeline with backend cuda needs a GPU, and the Ray cluster has none",
                              hint="run it with --backend cpu, or join a cluster with GPUs")
        return num_cpus, 1, "backend cuda: one whole GPU"
    if backend == "auto":
        if cluster_gpus >= 1:
            return num_cpus, 1, "backend auto and the cluster has GPUs: one whole GPU"
        return num_cpus, 0, "backend auto and the cluster has no GPU: CPU only"
    return num_cpus, 0, "backend cpu: no GPU"


class ClusterResolver:
    """``cluster://NAME`` inside an actor: bind on the node's address, connect where told."""

    def __init__(self, node_ip: str, addresses: dict[str, str] | None = None):
        self.node_ip = node_ip
        self.addresses = dict(addresses or {})

    def __call__(self, text: str, bind: bool) -> str:
        name = endpoints.link_name(text)
        assert name is not None
        if bind:
            host = f"[{self.node_ip}]" if ":" in self.node_ip else self.node_ip
            return f"tcp://{host}:*"
        if name not in self.addresses:
            raise ValueError(f"'{text}': no address for cluster link '{name}' (its binding pipeline has not "
                             "reported one)")
        return self.addresses[name]


# ----------------------------------------------------------------------------- the actor


def _error_info(exc: BaseException) -> dict[str, Any]:
    summary = getattr(exc, "summary", None)
    code = exc.exit_code if isinstance(exc, GkError) else 1
    return {"type": type(exc).__name__, "message": str(exc), "exit_code": code,
            "summary": summary.to_dict() if isinstance(summary, RunSummary) else None}


class PipelineActor:
    """Runs one pipeline of a file in its own Session (made a Ray actor by :func:`run_cluster`)."""

    def __init__(self, path: str, name: str, backend: str | None, device: Any):
        import ray

        self.node_ip = ray.util.get_node_ip_address()
        self.resolver = ClusterResolver(self.node_ip)
        endpoints.register_scheme(endpoints.CLUSTER_SCHEME, self.resolver)
        from .pipeline import Pipeline

        self.pipeline = next(p for p in Pipeline.load_all(path) if p.name == name)
        self.backend, self.device = backend, device
        self.session: Any = None
        self.result: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None
        ids = ray.get_gpu_ids()
        self.where = {"node_ip": self.node_ip, "host": socket.gethostname(), "pid": os.getpid(),
                      "ray_gpu_ids": [str(i) for i in ids],
                      "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def start(self, addresses: dict[str, str], blocks: int | None, duration: float | None,
              open_timeout_s: float) -> dict[str, Any]:
        """Open the pipeline (binding its links) and run it on a thread; returns where it runs,
        the addresses its links got, or the error that stopped it before it ran."""
        from .session import Session

        self.resolver.addresses.update(addresses)
        self.session = Session([self.pipeline], backend=self.backend, device=self.device)

        def work() -> None:
            try:
                self.result = {"summaries": [s.to_dict() for s in self.session.run(blocks=blocks, duration=duration)],
                               "error": None}
            except BaseException as exc:  # reported to the driver as data
                self.result = {"summaries": [], "error": _error_info(exc)}

        self.thread = threading.Thread(target=work, name=f"gk-actor-{self.pipeline.name}", daemon=True)
        self.thread.start()
        binders = [c for c in (self.pipeline.source, self.pipeline.sink)
                   if getattr(c, "type", None) == "zmq" and c.params.bind
                   and endpoints.link_name(c.params.endpoint) is not None]
        deadline = time.monotonic() + open_timeout_s
        while any(c.endpoint_bound is None for c in binders) and self.thread.is_alive():
            if time.monotonic() > deadline:
                self.session.stop("stop (not opened in time)", abort=True)
                return {**self.where, "bound": {}, "error": {
                    "type": "StreamFault", "exit_code": 1, "summary": None,
                    "message": f"pipeline '{self.pipeline.name}' did not open within {open_timeout_s:g} s"}}
            time.sleep(0.01)
        if not self.thread.is_alive() and self.result is not None and self.result["error"] is not None:
            return {**self.where, "bound": {}, "error": self.result["error"]}
        bound = {endpoints.link_name(c.params.endpoint): c.endpoint_bound for c in binders}
        return {**self.where, "bound": bound, "error": None}

    def wait(self) -> dict[str, Any]:
        """The run's summaries (dicts) and error, once it ended."""
        if self.thread is not None:
            self.thread.join()
        return self.result or {"summaries": [], "error": None}

    def stop(self, reason: str = "stop", abort: bool = False) -> None:
        if self.session is not None:
            self.session.stop(reason, abort=abort)


# ----------------------------------------------------------------------------- the driver


def summary_from_dict(d: dict[str, Any]) -> RunSummary:
    """A RunSummary back from ``RunSummary.to_dict()`` (what an actor sends)."""
    fields = {k: v for k, v in d.items() if k in RunSummary.__dataclass_fields__}
    sched = fields.get("scheduler")
    if isinstance(sched, dict):
        fields["scheduler"] = SchedulerAccounting(**sched)
    return RunSummary(**fields)


@dataclass
class ClusterRun:
    """What a cluster run reports: each pipeline's summary and where it ran."""

    how: str                                   # "local instance" | "cluster at ..."
    nodes: int
    resources: dict[str, float]
    placements: dict[str, dict[str, Any]]      # pipeline -> node_ip, host, ray_gpu_ids, num_cpus, num_gpus, why
    summaries: list[RunSummary]
    errors: dict[str, dict[str, Any]]          # pipeline -> error info (type, message, exit_code, summary)

    @property
    def exit_code(self) -> int:
        if not self.errors:
            return 0
        return max(int(e.get("exit_code", 1)) for e in self.errors.values())

    def placement_line(self, name: str) -> str:
        pl = self.placements.get(name, {})
        gpus = pl.get("ray_gpu_ids") or []
        gpu = f"GPU {', '.join(gpus)} (Ray's id; CUDA_VISIBLE_DEVICES={pl.get('cuda_visible_devices')})" \
            if gpus else "no GPU"
        return (f"  ray node {pl.get('node_ip', '?')} ({pl.get('host', '?')}, pid {pl.get('pid', '?')}), {gpu}; "
                f"asked num_cpus={pl.get('num_cpus')}, num_gpus={pl.get('num_gpus')}: {pl.get('why', '')}")

    def header(self) -> str:
        res = ", ".join(f"{k} {self.resources.get(k, 0):g}" for k in ("CPU", "GPU"))
        return f"cluster: ray ({self.how}), {self.nodes} node(s), {res}"


def run_cluster(path: str | Path, target: str, *, pipeline: str | None = None, backend: str | None = None,
                device: Any = None, blocks: int | None = None, duration: float | None = None,
                num_cpus: float = DEFAULT_CPUS, place_timeout_s: float = PLACE_TIMEOUT_S,
                say: Any = None) -> ClusterRun:
    """Run every pipeline of ``path`` (or the one named ``pipeline``) on Ray actors; see the module."""
    from .pipeline import Pipeline

    ray = import_ray()
    path = Path(path).resolve()
    pipelines = Pipeline.load_all(path)  # ConfigErrors here, before Ray starts
    if pipeline is not None:
        pipelines = [p for p in pipelines if p.name == pipeline]
        if not pipelines:
            raise ConfigError(f"no pipeline named '{pipeline}'")
    links = plan_links(pipelines)
    waves = start_order(pipelines, links)
    by_name = {p.name: p for p in pipelines}

    how = init_ray(ray, target)
    actors: dict[str, Any] = {}
    stopped: list[str] = []
    previous: dict[int, Any] = {}
    try:
        resources = {k: float(v) for k, v in ray.cluster_resources().items()}
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        asks = {p.name: resources_for(backend or p.backend, resources.get("GPU", 0.0), num_cpus) for p in pipelines}

        def on_signal(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            stopped.append(name)
            if len(stopped) >= 3:  # leave now: the finally below kills the actors and shuts Ray down
                raise KeyboardInterrupt
            for a in actors.values():
                a.stop.remote(name, len(stopped) > 1)
            if say:
                say(f"{name}: stopping every pipeline after its current block"
                    + (" (aborting)" if len(stopped) > 1 else " (again to abort)"))

        if threading.current_thread() is threading.main_thread():
            previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

        remote = ray.remote(PipelineActor)
        placements: dict[str, dict[str, Any]] = {}
        addresses: dict[str, str] = {}
        errors: dict[str, dict[str, Any]] = {}
        for wave in waves:
            refs = {}
            for name in wave:
                cpus, gpus, why = asks[name]
                actor = remote.options(num_cpus=cpus, num_gpus=gpus, max_concurrency=4).remote(str(path), name, backend, device)
                actors[name] = actor
                needed = {ln: addresses[ln] for ln in pipeline_links(by_name[name])[1]}
                refs[name] = actor.start.remote(needed, blocks, duration, place_timeout_s)
                placements[name] = {"num_cpus": cpus, "num_gpus": gpus, "why": why}
            for name, ref in refs.items():
                info = _get(ray, ref, place_timeout_s * 2, name, asks[name], resources)
                placements[name].update({k: v for k, v in info.items() if k not in ("bound", "error")})
                if info.get("error"):
                    errors[name] = info["error"]
                addresses.update(info.get("bound") or {})
                if say:
                    say(f"[{name}] on {info.get('node_ip')} ({info.get('host')})"
                        + "".join(f", bound {ln} at {a}" for ln, a in (info.get("bound") or {}).items()))
            if errors:
                break
        if errors:  # some pipeline could not open: stop the ones already running
            for name, a in actors.items():
                if name not in errors:
                    a.stop.remote(f"stop (pipeline '{next(iter(errors))}' failed)", True)

        waits = {name: a.wait.remote() for name, a in actors.items()}
        results: dict[str, dict[str, Any]] = {}
        pending = dict(waits)
        stop_sent_at: float | None = None
        while pending:
            ready, _ = ray.wait(list(pending.values()), num_returns=1, timeout=0.2)
            for ref in ready:
                name = next(n for n, r in pending.items() if r == ref)
                del pending[name]
                results[name] = ray.get(ref)
                err = results[name].get("error")
                if err and name not in errors:
                    errors[name] = err
                    for other in pending:
                        actors[other].stop.remote(f"stop (pipeline '{name}' failed)", False)
            if stopped and stop_sent_at is None:
                stop_sent_at = time.monotonic()
            if stop_sent_at is not None and pending and time.monotonic() - stop_sent_at > STOP_GRACE_S:
                for name in list(pending):
                    ray.kill(actors[name])
                    errors[name] = {"type": "StreamFault", "exit_code": 1, "summary": None,
                                    "message": f"pipeline '{name}' did not stop within {STOP_GRACE_S:g} s; "
                                               "its actor was killed"}
                    del pending[name]
        summaries = []
        for p in pipelines:
            res = results.get(p.name) or {}
            for d in res.get("summaries", []):
                summaries.append(summary_from_dict(d))
        return ClusterRun(how=how, nodes=nodes, resources=resources, placements=placements,
                          summaries=summaries, errors=errors)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for a in actors.values():
            try:
                ray.kill(a)
            except Exception:
                pass
        ray.shutdown()


def _get(ray: Any, ref: Any, timeout: float, name: str, ask: tuple, resources: dict[str, float]) -> dict[str, Any]:
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    try:
        return ray.get(ref, timeout=timeout)
    except GetTimeoutError:
        raise ConfigError(f"Ray did not start pipeline '{name}' within {timeout:g} s: it asks for num_cpus={ask[0]}, "
                          f"num_gpus={ask[1]}, the cluster has "
                          f"CPU {resources.get('CPU', 0):g}, GPU {resources.get('GPU', 0):g} in all",
                          hint="fewer pipelines, a smaller --cluster-cpus, or a larger cluster") from None
    except (RayActorError, RayTaskError) as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, GkError):
            raise cause from None
        raise StreamFault(f"the actor of pipeline '{name}' failed: {exc}") from None


def cmd_run_cluster(args: Any) -> int:
    """``gk-stream run FILE --cluster TARGET``: the report, and the exit code of the worst pipeline."""
    from .cli_format import err, qos_lines, write_json

    def say(line: str) -> None:
        if not args.quiet:
            print(f"gk-stream: {line}", file=sys.stderr, flush=True)

    run = run_cluster(args.file, args.cluster, pipeline=args.pipeline, backend=args.backend, device=args.device,
                      blocks=args.blocks, duration=args.duration,
                      num_cpus=args.cluster_cpus if args.cluster_cpus is not None else DEFAULT_CPUS, say=say)
    print(run.header())
    for s in run.summaries:
        print(s.format())
        print(run.placement_line(s.pipeline))
    for name, error in run.errors.items():
        err(f"error: pipeline '{name}' (ray node {run.placements.get(name, {}).get('node_ip', '?')}): "
            f"{error['message']}")
        if error.get("summary"):
            s = summary_from_dict(error["summary"])
            print(s.format())
            print(run.placement_line(name))
    if run.summaries:
        print(qos_lines(run.summaries))
    if args.stats_json:
        data = [{**s.to_dict(), "cluster": run.placements.get(s.pipeline, {})} for s in run.summaries]
        data += [{"pipeline": n, "error": e, "cluster": run.placements.get(n, {})} for n, e in run.errors.items()]
        write_json(args.stats_json, data)
    if run.errors:
        return run.exit_code
    for s in run.summaries:
        for name, code in (("SIGINT", 130), ("SIGTERM", 143)):
            if s.ended_by.startswith(name):
                return code
    return 0
