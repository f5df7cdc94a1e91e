"""Every code block of README.md and docs/*.md runs as written (tests/doc_examples.py says how
each language is run and how blocks are marked).

* Unmarked blocks run here, on a machine without a GPU (console commands see no CUDA driver).
* ``<!-- doc-test: gpu -->`` / ``multi_gpu`` blocks run in gpu-marked tests (the GPU machine).
* ``<!-- doc-test: jack -->`` blocks run against a JACK server with the dummy backend (the one
  the live-audio tests use, or one started here), in a fresh interpreter each.
* Long runs in the docs run shorter (doc_examples.SHORTER: ``--duration 30`` runs 1 s,
  ``time.sleep(10)`` sleeps 0.5 s) where the output shown does not depend on the length.
* ``<!-- doc-test: gnuradio FILE.yaml -->`` blocks (GNU Radio flowgraphs) run by the system's
  python3 beside ``gk-stream run FILE.yaml``; without GNU Radio they skip (gnuradio_python).
* ``illustrative`` blocks are not run; test_illustrative_blocks_are_few_and_say_why lists them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from . import doc_examples as dx

BLOCKS = dx.all_blocks()
MAX_ILLUSTRATIVE = 40  # raise it only for a block that truly is no code a user runs


def _param(block: dx.Block):
    marks = {"gpu": [pytest.mark.gpu], "multi_gpu": [pytest.mark.multi_gpu]}.get(block.marker, [])
    return pytest.param(block, id=f"{block.id}-{block.lang or 'text'}", marks=marks)


def _run(block: dx.Block, workdir: Path, *, gpu: bool, jack: dict[str, str] | None = None) -> None:
    """``jack``: the environment that points PortAudio at the JACK server, for a jack block."""
    env = dx.environment(gpu=gpu, extra=jack)
    lang = block.lang
    if lang == "python":
        if jack is not None:  # a live audio block: in its own interpreter, PortAudio stays closed here
            dx.run_python_subprocess(block, workdir, env)
        else:
            dx.run_python_block(block, workdir)
    elif lang == "yaml":
        dx.check_yaml(block, workdir)
    elif lang == "console":
        dx.run_console(block, workdir, env)
    elif lang in ("bash", "sh"):
        dx.check_shell(block)
    elif lang == "json":
        dx.check_json(block)
    else:
        raise AssertionError(f"{block.id}: no runner for language {lang!r}")


# unmarked blocks, and the file blocks (checked by their language as well as by the blocks using them)
HERE = [b for b in BLOCKS if b.marker in (None, "file") and b.lang in dx.RUNNABLE]  # others: the next test
GPU = [b for b in BLOCKS if b.marker in ("gpu", "multi_gpu")]
JACK = [b for b in BLOCKS if b.marker == "jack"]
GNURADIO = [b for b in BLOCKS if b.marker == "gnuradio"]
FILES = [b for b in BLOCKS if b.marker == "file"]
ILLUSTRATIVE = [b for b in BLOCKS if b.marker == "illustrative"]


@pytest.mark.parametrize("block", [_param(b) for b in HERE])
def test_doc_example_runs_here(block, tmp_path):
    from pygpukit_dsp.errors import ConfigError

    try:
        _run(block, dx.make_workdir(tmp_path, block), gpu=False)
    except ConfigError:
        # a file the page shows with its mistakes: a console block after it runs it and shows them
        if not (block.marker == "file" and _shown_by_console(block)):
            raise


def _shown_by_console(f: dx.Block) -> bool:
    return any(b.doc == f.doc and b.line > f.line and b.lang == "console" and f.arg in b.text for b in BLOCKS)


@pytest.mark.parametrize("block", [_param(b) for b in GPU])
def test_doc_example_runs_on_a_gpu(block, tmp_path):
    _run(block, dx.make_workdir(tmp_path, block), gpu=True)


@pytest.mark.parametrize("block", [_param(b) for b in JACK])
def test_doc_example_runs_against_jack(block, tmp_path, jack_env):
    _run(block, dx.make_workdir(tmp_path, block), gpu=False, jack=jack_env)


@pytest.mark.parametrize("block", [_param(b) for b in GNURADIO])
def test_doc_flowgraph_runs_with_gnu_radio(block, tmp_path, gnuradio_python):
    workdir = dx.make_workdir(tmp_path, block)
    dx.run_with_gnuradio(block, workdir, dx.environment(gpu=False), gnuradio_python)


def test_every_block_is_run_or_marked():
    unrunnable = [b.id for b in BLOCKS if b.marker is None and b.lang not in dx.RUNNABLE]
    assert not unrunnable, ("blocks in a language no runner takes need a marker "
                            f"(<!-- doc-test: illustrative (reason) --> for text that is no code): {unrunnable}")
    assert len(HERE) > 40 and {b.lang for b in HERE} >= {"python", "yaml", "console", "bash"}


def test_every_file_block_is_used_by_a_later_block_of_its_page():
    for f in FILES:
        later = [b for b in BLOCKS if b.doc == f.doc and b.line > f.line and b.marker != "file"]
        name = Path(f.arg).stem  # mic_eq.yaml; a module by its name (my_sensors:read_block)
        assert any(name in b.text for b in later), f"{f.id}: no block after it uses {f.arg}"


def test_illustrative_blocks_are_few_and_say_why():
    listing = "\n".join(f"  {b.id} ({b.lang or 'no language'}): {b.arg}" for b in ILLUSTRATIVE)
    print(f"{len(ILLUSTRATIVE)} illustrative blocks, not run:\n{listing}")
    assert len(ILLUSTRATIVE) <= MAX_ILLUSTRATIVE, listing
    assert all(len(b.arg.split()) >= 2 for b in ILLUSTRATIVE), listing
    assert not [b for b in ILLUSTRATIVE if b.lang == "console"], "a console block runs, or is marked gpu/jack"


# ------------------------------------------------------------------ checks of the checker
def test_output_matching_masks_what_varies_and_nothing_else():
    shown = ["$ gk-stream run demo.yaml", "pipeline x: backend=cpu (auto: ...)", "...",
             "  blocks 235, 0.095 s wall; misses 0", "streams:", "  x   p99     581.6 us"]
    _, expected = dx.console_steps("\n".join(shown))[0]
    run = ("pipeline x: backend=cpu (auto: CUDA driver not detected (why))\n  input 2 ch\n  output 2 ch\n"
           "  blocks 235, 0.313 s wall; misses 3\nstreams:\n  x   p99    1852.3 us\n")
    assert dx.match_output(expected, run)
    assert not dx.match_output(expected, run.replace("blocks 235", "blocks 234"))  # a count that must hold
    assert not dx.match_output(expected, run + "another line\n")  # the block shows the whole output
    assert not dx.match_output(expected, run.replace("streams:", "stream:"))


def test_python_outputs_are_checked(tmp_path):
    dx.run_python("x = 2\nprint(x + 1)   # -> 3\nx * 2   # -> 4\nprint('a b c')  # -> a ... c\n",
                  where="t.md", first_line=1)
    with pytest.raises(dx.DocError, match=r"t.md:10: printed '3', the doc shows '4'"):
        dx.run_python("print(3)  # -> 4\n", where="t.md", first_line=10)


def test_yaml_fragments_keep_the_docs_lines_in_errors(tmp_path):
    bad = dx.Block("docs/x.md", 20, "yaml", "- {type: fir, taps: [1]}\n- {type: fri}\n", None, "")
    with pytest.raises(Exception, match=r"docs/x.md:22:\d+: unknown stage type 'fri'"):
        dx.check_yaml(bad, dx.make_workdir(tmp_path, dx.Block("README.md", 1, "yaml", "", None, "")))


def test_shell_blocks_name_files_that_exist_and_commands_that_parse():
    dx.check_shell(dx.Block("t.md", 1, "bash", "pip install ./rust/pygpukit-python  # build\n"
                            "gk-stream run pipelines/demo.yaml --blocks 5\n", None, ""))
    with pytest.raises(dx.DocError, match="names scripts/no_such.sh"):
        dx.check_shell(dx.Block("t.md", 1, "bash", "bash scripts/no_such.sh\n", None, ""))
    with pytest.raises(dx.DocError, match="unrecognized arguments: --blokcs"):
        dx.check_shell(dx.Block("t.md", 1, "bash", "gk-stream run demo.yaml --blokcs 5\n", None, ""))
    with pytest.raises(dx.DocError, match="bash -n"):
        dx.check_shell(dx.Block("t.md", 1, "bash", "if then fi\n", None, ""))


def test_markers_are_read_from_the_line_before_the_fence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- doc-test: illustrative (a diagram) -->\n```\na -> b\n```\n\n"
                    "<!-- doc-test: gpu -->\n  ```python\n  x = 1\n  ```\n")
    diagram, code = dx.parse(page)
    assert (diagram.marker, diagram.arg, diagram.lang) == ("illustrative", "a diagram", "")
    assert (code.marker, code.lang, code.text, code.line) == ("gpu", "python", "x = 1\n", 9)
    for bad, why in [("<!-- doc-test: illustrative -->\n```\nx\n```\n", "needs a reason"),
                     ("<!-- doc-test: gpu -->\n\n```python\nx = 1\n```\n", "just before a code block"),
                     ("<!-- doc-test: cpu -->\n```python\nx = 1\n```\n", "unknown doc-test marker 'cpu'")]:
        page.write_text(bad)
        with pytest.raises(dx.DocError, match=why):
            dx.parse(page)


# ------------------------------------------------------------------ the JACK server
def _load_jack_server():
    spec = importlib.util.spec_from_file_location("_gk_docs_jack_server", Path(__file__).with_name("io")
                                                  / "jack_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def jack_env():
    """The environment that points PortAudio at a JACK server with the dummy backend: the one
    running (CI's, or the live-audio tests'), else one started here and stopped by its PID."""
    try:
        import jack  # noqa: F401  (the JACK-Client package, which the helper uses)
        import sounddevice  # noqa: F401
    except (ImportError, OSError) as exc:
        _no_jack(f"the live tests' Python packages are missing ({exc})")
    js = _load_jack_server()
    name = os.environ.get("JACK_DEFAULT_SERVER")
    if js.server_running(name):
        yield js.JackServer(name, None).env
        return
    if js.jackd_path() is None:
        _no_jack("jackd is not installed and no JACK server is running")
    server = js.JackServer.start("gk-test")
    try:
        yield server.env
    finally:
        server.stop()


def _no_jack(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(f"{reason}; the jack doc examples need a JACK server (apt-get install jackd2 libportaudio2)")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
