/*
 * gk/sched_abi.h: C ABI of the pygpukit-dsp scheduler and memory-pool policy (Rust), version 1.
 *
 * The Rust extension `pygpukit_dsp_core` exports one table of function pointers,
 * gk_sched_abi_v1, in a PyCapsule. The C++ engine takes the table from Python once
 * and then calls it from its own threads without the GIL, without linking to Rust:
 *
 *     // with the GIL held, once:
 *     auto *abi = static_cast<const gk_sched_abi_v1 *>(
 *         PyCapsule_Import(GK_SCHED_ABI_CAPSULE_NAME, 0));          // pygpukit_dsp_core._sched_abi_v1
 *     if (!abi || abi->abi_version != GK_SCHED_ABI_VERSION
 *              || abi->struct_size < sizeof(gk_sched_abi_v1)) { ...error... }
 *     // a scheduler shared with Python: Scheduler.capsule() holds a gk_sched* named
 *     // GK_SCHED_HANDLE_CAPSULE_NAME; take your own reference with sched_retain.
 *     gk_sched *s = static_cast<gk_sched *>(PyCapsule_GetPointer(cap, GK_SCHED_HANDLE_CAPSULE_NAME));
 *     abi->sched_retain(s);
 *     // worker thread, per block:
 *     abi->submit(s, stream, arrival_ns, &task, &deadline);
 *     gk_decision d; abi->next(s, GK_TIME_NOW, &d);   // LAUNCH / WAIT / IDLE
 *     ... launch d.chunk_begin..d.chunk_end of d.task, record events ...
 *     abi->complete(s, d.task, gpu_ns, finish_ns, NULL);   // once per chunk, in launch order
 *     // at shutdown:
 *     abi->sched_release(s);
 *
 * Conventions
 * - Every time is uint64_t nanoseconds on the scheduler's clock. The monotonic clock is
 *   CLOCK_MONOTONIC, i.e. std::chrono::steady_clock on Linux, so engine timestamps can be
 *   passed directly. GK_TIME_NOW as a time argument means "read the scheduler's clock".
 * - Functions return int32_t status codes (GK_OK or GK_ERR_*) and write results to
 *   out-parameters; out-parameters marked "nullable" may be NULL. On an error, out-params
 *   are left untouched (except gk_admission_refusal, filled on GK_ERR_ADMISSION_REFUSED)
 *   and last_error() returns a message saying what was wrong.
 * - Input structs start with struct_size = sizeof(the struct); a smaller value is refused
 *   with GK_ERR_STRUCT_SIZE, so later versions can append fields. Exception: gk_sched_config
 *   takes any struct_size >= GK_SCHED_CONFIG_V1_SIZE (its size before fields were appended);
 *   fields past struct_size are not read and take their defaults.
 * - Lookahead: a non-realtime task may have up to max_chunks_in_flight chunks launched and
 *   not completed. complete(task) retires the task's OLDEST chunk in flight, so call it once
 *   per chunk in launch order (chunks of one task run on one CUDA stream, so they finish in
 *   that order). While a later chunk is still in flight it reports GK_TASK_DISPATCHED.
 * - Thread safety: every handle holds a mutex; any function may be called from any thread,
 *   concurrently with Python reading statistics. No function calls into Python.
 * - No Rust panic crosses this boundary: it is caught and reported as GK_ERR_PANIC; a
 *   scheduler whose state may be inconsistent after one then answers GK_ERR_POISONED.
 * - Handles are reference counted: *_create returns one reference; *_retain adds one;
 *   *_release drops one and frees the object with the last. Using a handle after its last
 *   release is undefined behaviour.
 */
#ifndef GK_SCHED_ABI_H
#define GK_SCHED_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GK_SCHED_ABI_VERSION 1u
#define GK_SCHED_ABI_CAPSULE_NAME "pygpukit_dsp_core._sched_abi_v1"
#define GK_SCHED_HANDLE_CAPSULE_NAME "pygpukit_dsp_core._sched_handle_v1"
#define GK_POOL_HANDLE_CAPSULE_NAME "pygpukit_dsp_core._pool_handle_v1"

/* As a time argument: use the scheduler's clock. As a deadline or time result: none. */
#define GK_TIME_NOW UINT64_MAX
#define GK_NO_TIME UINT64_MAX
/* As complete()'s measured_cost_ns: the chunk was not timed (its estimate stands in for the
 * device's busy time; the stream's cost model learns nothing from it). */
#define GK_COST_UNMEASURED UINT64_MAX

/* ---- status codes ---------------------------------------------------------------------- */
#define GK_OK 0
#define GK_ERR_INVALID_ARGUMENT (-1)   /* a parameter out of range; last_error() says which */
#define GK_ERR_UNKNOWN_STREAM (-2)
#define GK_ERR_UNKNOWN_TASK (-3)
#define GK_ERR_ILLEGAL_TRANSITION (-4) /* e.g. complete() on a task that is not dispatched */
#define GK_ERR_ADMISSION_REFUSED (-5)  /* figures in gk_admission_refusal */
#define GK_ERR_DUPLICATE_STREAM (-6)
#define GK_ERR_NO_COST_SAMPLE (-7)     /* admit_stream() before any cost is known */
#define GK_ERR_OUT_OF_ORDER (-8)       /* a block released before the stream's previous one */
#define GK_ERR_UNKNOWN_BLOCK (-9)
#define GK_ERR_BLOCK_NOT_IN_USE (-10)  /* pool_release_block() twice */
#define GK_ERR_OVER_BUDGET (-11)       /* in-use blocks alone exceed the device budget */
#define GK_ERR_NULL_POINTER (-12)
#define GK_ERR_STRUCT_SIZE (-13)
#define GK_ERR_POISONED (-14)          /* an earlier internal panic left the handle unusable */
#define GK_ERR_WRONG_CLOCK (-15)       /* sched_set_time() on a scheduler with a real clock */
#define GK_ERR_PANIC (-99)             /* internal error caught at the boundary */

/* ---- enumerations ---------------------------------------------------------------------- */
#define GK_QOS_REALTIME 0
#define GK_QOS_THROUGHPUT 1
#define GK_QOS_BEST_EFFORT 2

#define GK_CLOCK_MONOTONIC 0u
#define GK_CLOCK_SIMULATED 1u

#define GK_DECISION_IDLE 0   /* nothing to launch until a submit or a completion */
#define GK_DECISION_LAUNCH 1 /* launch units [chunk_begin, chunk_end) of task */
#define GK_DECISION_WAIT 2   /* nothing may launch before wait_until_ns (or a submit/completion) */

#define GK_TASK_PENDING 0
#define GK_TASK_READY 1
#define GK_TASK_DISPATCHED 2
#define GK_TASK_COMPLETED 3
#define GK_TASK_MISSED 4
#define GK_TASK_DROPPED 5
#define GK_TASK_CANCELLED 6

#define GK_REFUSED_UTILISATION_BOUND 1 /* sum cost/period would exceed u_max */
#define GK_REFUSED_DEVICE_CAPACITY 2   /* realtime + reserved throughput would exceed 1 */
#define GK_REFUSED_RESPONSE_BOUND 3    /* sum of realtime costs + margin > shortest deadline */

/* ---- opaque handles -------------------------------------------------------------------- */
typedef struct gk_sched gk_sched;
typedef struct gk_pool gk_pool;

/* ---- scheduler structs ----------------------------------------------------------------- */
typedef struct gk_sched_config {
    uint32_t struct_size;        /* sizeof(gk_sched_config) */
    uint32_t clock;              /* GK_CLOCK_MONOTONIC or GK_CLOCK_SIMULATED */
    double u_max;                /* realtime utilisation bound, (0, 1]; e.g. 0.9 */
    uint64_t quantum_ns;         /* target device time of one non-realtime chunk; e.g. 250000 */
    uint64_t safety_margin_ns;   /* slack kept before realtime deadlines; e.g. 50000 */
    double ewma_alpha;           /* weight of a new cost measurement, (0, 1]; e.g. 0.2 */
    uint64_t simulated_start_ns; /* start time of a simulated clock */
    /* ---- appended after v1 (struct_size >= GK_SCHED_CONFIG_V1_SIZE; missing = default) ---- */
    uint32_t max_chunks_in_flight; /* lookahead: chunks of one non-realtime task on the device at
                                      once; 1 = the next after the previous completed; 0 = default (2) */
} gk_sched_config; /* sizeof 56 (48 + 4 + padding) */

/* sizeof(gk_sched_config) before max_chunks_in_flight: the smallest struct_size accepted. */
#define GK_SCHED_CONFIG_V1_SIZE 48u

typedef struct gk_stream_spec {
    uint32_t struct_size;     /* sizeof(gk_stream_spec) */
    int32_t qos;              /* GK_QOS_* */
    const char *name;         /* UTF-8, NUL-terminated, unique among registered streams */
    uint64_t period_ns;       /* realtime: block_size / sample_rate; otherwise ignored */
    uint64_t deadline_ns;     /* relative; 0 = the period (realtime) or none (others) */
    double min_rate_hz;       /* throughput: blocks/s to reserve; 0 = no reservation */
    uint64_t cost_ns;         /* declared device time of one block; 0 = measure it */
    uint32_t units_per_block; /* >= 1: independently launchable units (chunks are unit ranges) */
    uint32_t reserved0;       /* set to 0 */
} gk_stream_spec;

typedef struct gk_admission_refusal {
    int32_t reason; /* GK_REFUSED_* */
    uint32_t reserved0;
    double stream_utilisation;     /* the stream's share (response bound: cost / shortest deadline) */
    double current_total;          /* admitted total before it (response bound: (sum + margin) / deadline) */
    double bound;                  /* u_max, or 1.0 */
    uint64_t stream_cost_ns;
    uint64_t cost_sum_ns;          /* sum of admitted realtime block costs */
    uint64_t safety_margin_ns;
    uint64_t shortest_deadline_ns; /* including the stream's own */
} gk_admission_refusal;

typedef struct gk_decision {
    int32_t kind;           /* GK_DECISION_* */
    uint32_t stream;        /* LAUNCH: the task's stream */
    uint64_t task;          /* LAUNCH: task id; else 0 */
    uint32_t chunk_begin;   /* LAUNCH: first unit */
    uint32_t chunk_end;     /* LAUNCH: one past the last unit */
    uint64_t deadline_ns;   /* LAUNCH: absolute deadline or GK_NO_TIME */
    uint64_t est_cost_ns;   /* LAUNCH: estimated device time of the chunk */
    uint64_t wait_until_ns; /* WAIT: earliest time anything may launch; else GK_NO_TIME */
    uint32_t is_final;      /* LAUNCH: 1 if this chunk finishes the block */
    uint32_t reserved0;
} gk_decision;

typedef struct gk_completion {
    int32_t state;            /* GK_TASK_DISPATCHED (a later chunk still in flight), GK_TASK_READY
                                 (none in flight, units remain), GK_TASK_COMPLETED or GK_TASK_MISSED */
    uint32_t remaining_units;
    uint64_t latency_ns;      /* release-to-finish once finished; else GK_NO_TIME */
} gk_completion;

typedef struct gk_latency_summary {
    uint64_t count;
    uint64_t min_ns;
    uint64_t max_ns;
    uint64_t p50_ns;
    uint64_t p90_ns;
    uint64_t p99_ns;
    uint64_t p999_ns;
    uint64_t clamped; /* values above the histogram range, recorded as its highest value */
    double mean_ns;
} gk_latency_summary;

typedef struct gk_stream_stats {
    uint32_t stream;
    int32_t qos;               /* GK_QOS_* */
    uint32_t admitted;         /* 0 while calibrating (runs as best effort) */
    uint32_t units_per_block;
    uint64_t period_ns;        /* GK_NO_TIME unless realtime */
    uint64_t deadline_ns;      /* relative; GK_NO_TIME if none */
    double min_rate_hz;        /* 0 if none */
    uint64_t cost_ns;          /* used for admission and pacing; GK_NO_TIME if unknown */
    uint64_t declared_cost_ns; /* GK_NO_TIME if not declared */
    uint64_t measured_cost_ns; /* EWMA; GK_NO_TIME if not measured yet */
    uint64_t measured_cost_max_ns;
    uint64_t cost_samples;
    double utilisation;        /* reserved share of the device */
    uint64_t submitted;
    uint64_t completed;        /* finished by the deadline (or without one) */
    uint64_t missed;           /* finished after the deadline */
    uint64_t dropped;
    uint64_t cancelled;
    uint64_t live;             /* tasks not finished yet */
    uint64_t chunks;           /* launches */
    uint64_t busy_ns;          /* measured device time */
    double achieved_rate_hz;   /* finished blocks per second */
    gk_latency_summary latency;
} gk_stream_stats;

typedef struct gk_sched_stats {
    uint64_t now_ns;
    double u_max;
    double realtime_utilisation;
    double throughput_reserved;
    uint32_t over_bound; /* realtime costs grew past u_max after admission */
    uint32_t streams;
    uint64_t launches;
    uint64_t waits;
    uint64_t idles;
    uint64_t paced;      /* decisions where pacing held every candidate chunk back */
    uint64_t live_tasks;
    uint64_t in_flight;
    uint64_t device_free_estimate_ns;
} gk_sched_stats;

/* ---- pool structs ---------------------------------------------------------------------- */
typedef struct gk_pool_config {
    uint32_t struct_size;         /* sizeof(gk_pool_config) */
    uint32_t steps_per_doubling;  /* size classes per power of two: 1, 2, 4 (default), ... 64 */
    uint64_t min_block_bytes;     /* smallest class, a power of two, e.g. 256 */
    uint64_t cache_budget_bytes;  /* most idle bytes kept cached */
    uint64_t device_budget_bytes; /* cap on in-use + cached bytes; 0 = unlimited */
} gk_pool_config;

typedef struct gk_pool_grant {
    uint64_t block;   /* id of the block to use */
    uint64_t bytes;   /* its size (the request rounded up to its class) */
    uint32_t reused;  /* 1: a cached block, its device memory is already allocated;
                         0: allocate `bytes` for the new id, after freeing the to_free ids */
    uint32_t to_free; /* ids waiting in the pool's free queue (take them with pool_take_to_free) */
} gk_pool_grant;

typedef struct gk_pool_stats {
    uint64_t hits;
    uint64_t misses;
    uint64_t evictions;
    uint64_t bytes_in_use;
    uint64_t bytes_cached;
    uint64_t blocks_in_use;
    uint64_t blocks_cached;
    uint64_t bytes_requested_in_use;
    uint64_t peak_bytes_in_use;
    uint64_t peak_bytes_reserved;
    uint64_t cache_budget_bytes;
    uint64_t device_budget_bytes; /* 0 = unlimited */
    uint64_t to_free;             /* evicted ids not taken yet */
} gk_pool_stats;

/* ---- the table ------------------------------------------------------------------------- */
typedef struct gk_sched_abi_v1 {
    uint32_t abi_version; /* GK_SCHED_ABI_VERSION */
    uint32_t struct_size; /* sizeof(gk_sched_abi_v1) of the provider; >= yours */

    /* Message of the last failed call on this thread, NUL-terminated into buf (truncated to
     * cap - 1 bytes). Returns the full message length; 0 if none. buf may be NULL to query it. */
    size_t (*last_error)(char *buf, size_t cap);

    /* -- scheduler: lifetime and clock -- */
    int32_t (*sched_create)(const gk_sched_config *config, gk_sched **out);
    void (*sched_retain)(gk_sched *s);
    void (*sched_release)(gk_sched *s);
    uint64_t (*sched_now_ns)(gk_sched *s);
    int32_t (*sched_set_time)(gk_sched *s, uint64_t t_ns); /* simulated clock only; never backwards */

    /* -- streams -- */
    int32_t (*register_stream)(gk_sched *s, const gk_stream_spec *spec, uint32_t *out_stream,
                               gk_admission_refusal *out_refusal /* nullable */);
    int32_t (*unregister_stream)(gk_sched *s, uint32_t stream); /* cancels its live tasks */
    int32_t (*admit_stream)(gk_sched *s, uint32_t stream, gk_admission_refusal *out_refusal /* nullable */);
    int32_t (*update_cost)(gk_sched *s, uint32_t stream, uint64_t measured_block_ns,
                           uint64_t *out_cost_ns /* nullable */);

    /* -- blocks -- */
    int32_t (*submit)(gk_sched *s, uint32_t stream, uint64_t arrival_ns /* or GK_TIME_NOW */,
                      uint64_t *out_task, uint64_t *out_deadline_ns /* nullable; GK_NO_TIME if none */);
    int32_t (*next)(gk_sched *s, uint64_t now_ns /* or GK_TIME_NOW */, gk_decision *out);
    int32_t (*complete)(gk_sched *s, uint64_t task, uint64_t measured_cost_ns,
                        uint64_t finish_ns /* or GK_TIME_NOW */, gk_completion *out /* nullable */);
    int32_t (*drop_task)(gk_sched *s, uint64_t task);   /* counted as a drop */
    int32_t (*cancel_task)(gk_sched *s, uint64_t task); /* not counted as a drop */
    int32_t (*task_state)(gk_sched *s, uint64_t task, int32_t *out_state); /* GK_TASK_* */

    /* -- statistics -- */
    int32_t (*stats)(gk_sched *s, gk_sched_stats *out);
    int32_t (*stream_stats)(gk_sched *s, uint32_t stream, gk_stream_stats *out);

    /* -- memory-pool policy (ids only: the caller does every cuMemAlloc/cuMemFree) -- */
    int32_t (*pool_create)(const gk_pool_config *config, gk_pool **out);
    void (*pool_retain)(gk_pool *p);
    void (*pool_release)(gk_pool *p);
    int32_t (*pool_acquire_block)(gk_pool *p, uint64_t size, gk_pool_grant *out);
    int32_t (*pool_release_block)(gk_pool *p, uint64_t block, uint32_t *out_to_free /* nullable */);
    int32_t (*pool_discard_block)(gk_pool *p, uint64_t block); /* caller freed it (or alloc failed) */
    int32_t (*pool_trim)(gk_pool *p, uint64_t target_cached_bytes, uint32_t *out_to_free /* nullable */);
    /* Move up to `capacity` evicted ids (least recently used first) into ids; free each one. */
    int32_t (*pool_take_to_free)(gk_pool *p, uint64_t *ids, uint32_t capacity, uint32_t *out_count);
    int32_t (*pool_stats)(gk_pool *p, gk_pool_stats *out);
} gk_sched_abi_v1;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GK_SCHED_ABI_H */
