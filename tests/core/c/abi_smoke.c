/* C-side check of gk/sched_abi.h against the Rust table: compiled by tests/core/test_capi.py
 * into a shared library and called through ctypes with the table from the capsule.
 * Each check returns its line number on failure so the Python test can point at it. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gk/sched_abi.h"

/* Same sizes as the Rust `layout_matches_the_header` test: a drifting struct fails both. */
_Static_assert(sizeof(gk_sched_config) == 56, "gk_sched_config");
_Static_assert(offsetof(gk_sched_config, max_chunks_in_flight) == GK_SCHED_CONFIG_V1_SIZE, "config v1 size");
_Static_assert(sizeof(gk_stream_spec) == 56, "gk_stream_spec");
_Static_assert(sizeof(gk_admission_refusal) == 64, "gk_admission_refusal");
_Static_assert(sizeof(gk_decision) == 56, "gk_decision");
_Static_assert(sizeof(gk_completion) == 16, "gk_completion");
_Static_assert(sizeof(gk_latency_summary) == 72, "gk_latency_summary");
_Static_assert(sizeof(gk_stream_stats) == 232, "gk_stream_stats");
_Static_assert(sizeof(gk_sched_stats) == 96, "gk_sched_stats");
_Static_assert(sizeof(gk_pool_config) == 32, "gk_pool_config");
_Static_assert(sizeof(gk_pool_grant) == 24, "gk_pool_grant");
_Static_assert(sizeof(gk_pool_stats) == 104, "gk_pool_stats");
_Static_assert(sizeof(gk_sched_abi_v1) == 8 + 27 * sizeof(void *), "gk_sched_abi_v1");

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            snprintf(msg, cap, "abi_smoke.c:%d: %s", __LINE__, #cond);                       \
            return __LINE__;                                                                 \
        }                                                                                    \
    } while (0)

#define US 1000ull
#define MS 1000000ull

static gk_stream_spec spec(const char *name, int32_t qos, uint64_t period, uint64_t cost, uint32_t units) {
    gk_stream_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.qos = qos;
    s.name = name;
    s.period_ns = period;
    s.cost_ns = cost;
    s.units_per_block = units;
    return s;
}

/* A whole engine cycle through the table on a scheduler and a pool created from C. */
int gk_abi_smoke(const gk_sched_abi_v1 *abi, char *msg, size_t cap) {
    CHECK(abi != NULL);
    CHECK(abi->abi_version == GK_SCHED_ABI_VERSION);
    CHECK(abi->struct_size >= sizeof(gk_sched_abi_v1));

    /* Too small even for v1: refused. */
    gk_sched_config config = {GK_SCHED_CONFIG_V1_SIZE - 8, GK_CLOCK_SIMULATED, 0.9, 250 * US, 50 * US, 0.2, 0, 1};
    gk_sched *s = NULL;
    CHECK(abi->sched_create(&config, &s) == GK_ERR_STRUCT_SIZE && s == NULL);
    /* A v1 caller (struct without max_chunks_in_flight): the default lookahead, 2, applies
     * even though the bytes past struct_size say 1. */
    config.struct_size = GK_SCHED_CONFIG_V1_SIZE;
    CHECK(abi->sched_create(&config, &s) == GK_OK && s != NULL);

    uint32_t audio = 0, bulk = 0;
    gk_stream_spec rt = spec("audio", GK_QOS_REALTIME, 5 * MS, 100 * US, 1);
    CHECK(abi->register_stream(s, &rt, &audio, NULL) == GK_OK);
    gk_stream_spec tp = spec("bulk", GK_QOS_THROUGHPUT, 0, 800 * US, 8);
    CHECK(abi->register_stream(s, &tp, &bulk, NULL) == GK_OK);

    gk_admission_refusal refusal;
    memset(&refusal, 0, sizeof refusal);
    uint32_t unused = 0;
    gk_stream_spec big = spec("big", GK_QOS_REALTIME, 1 * MS, 950 * US, 1);
    CHECK(abi->register_stream(s, &big, &unused, &refusal) == GK_ERR_ADMISSION_REFUSED);
    CHECK(refusal.reason == GK_REFUSED_UTILISATION_BOUND);
    CHECK(refusal.bound == 0.9);
    CHECK(refusal.stream_utilisation > 0.949 && refusal.stream_utilisation < 0.951);
    CHECK(refusal.current_total > 0.0199 && refusal.current_total < 0.0201);
    char text[256];
    CHECK(abi->last_error(text, sizeof text) > 0);
    CHECK(strstr(text, "'big' not admitted") != NULL);

    uint64_t t_audio = 0, t_bulk = 0, deadline = 0;
    CHECK(abi->submit(s, audio, 0, &t_audio, &deadline) == GK_OK);
    CHECK(deadline == 5 * MS);
    CHECK(abi->submit(s, bulk, 0, &t_bulk, &deadline) == GK_OK);
    CHECK(deadline == GK_NO_TIME);

    gk_decision d;
    CHECK(abi->next(s, 0, &d) == GK_OK);
    CHECK(d.kind == GK_DECISION_LAUNCH && d.task == t_audio && d.stream == audio);
    CHECK(d.chunk_begin == 0 && d.chunk_end == 1 && d.is_final == 1 && d.est_cost_ns == 100 * US);
    CHECK(abi->next(s, 0, &d) == GK_OK);
    /* 800 us over 8 units: 100 us per unit, 2 units fit the 250 us quantum. */
    CHECK(d.kind == GK_DECISION_LAUNCH && d.task == t_bulk && d.chunk_begin == 0 && d.chunk_end == 2);
    CHECK(d.est_cost_ns == 200 * US && d.is_final == 0 && d.deadline_ns == GK_NO_TIME);
    /* Lookahead 2: the next chunk is queued behind the first before it completes. */
    CHECK(abi->next(s, 0, &d) == GK_OK);
    CHECK(d.kind == GK_DECISION_LAUNCH && d.task == t_bulk && d.chunk_begin == 2 && d.chunk_end == 4);
    CHECK(abi->next(s, 0, &d) == GK_OK);
    CHECK(d.kind == GK_DECISION_IDLE);

    gk_completion c;
    CHECK(abi->complete(s, t_audio, 100 * US, 100 * US, &c) == GK_OK);
    CHECK(c.state == GK_TASK_COMPLETED && c.latency_ns == 100 * US && c.remaining_units == 0);
    CHECK(abi->complete(s, t_bulk, 200 * US, 300 * US, &c) == GK_OK);
    CHECK(c.state == GK_TASK_DISPATCHED && c.remaining_units == 6 && c.latency_ns == GK_NO_TIME);
    CHECK(abi->complete(s, t_audio, 1, 1, NULL) == GK_ERR_ILLEGAL_TRANSITION);

    int32_t state = -1;
    CHECK(abi->task_state(s, t_bulk, &state) == GK_OK && state == GK_TASK_DISPATCHED);
    CHECK(abi->cancel_task(s, t_bulk) == GK_OK);
    CHECK(abi->task_state(s, t_bulk, &state) == GK_OK && state == GK_TASK_CANCELLED);

    gk_stream_stats st;
    CHECK(abi->stream_stats(s, audio, &st) == GK_OK);
    CHECK(st.stream == audio && st.qos == GK_QOS_REALTIME && st.admitted == 1);
    CHECK(st.submitted == 1 && st.completed == 1 && st.missed == 0 && st.chunks == 1);
    CHECK(st.period_ns == 5 * MS && st.deadline_ns == 5 * MS && st.cost_ns == 100 * US);
    CHECK(st.latency.count == 1 && st.latency.max_ns == 100 * US && st.latency.p50_ns == 100 * US);
    CHECK(st.latency.mean_ns == 100000.0);
    CHECK(abi->stream_stats(s, bulk, &st) == GK_OK);
    CHECK(st.units_per_block == 8 && st.cancelled == 1 && st.busy_ns == 200 * US);
    CHECK(st.measured_cost_ns == 800 * US);

    gk_sched_stats all;
    CHECK(abi->stats(s, &all) == GK_OK);
    CHECK(all.streams == 2 && all.launches == 3 && all.in_flight == 0 && all.over_bound == 0);
    CHECK(all.realtime_utilisation > 0.0199 && all.realtime_utilisation < 0.0201);

    CHECK(abi->sched_set_time(s, 7 * MS) == GK_OK);
    CHECK(abi->sched_now_ns(s) == 7 * MS);
    CHECK(abi->sched_set_time(s, 1 * MS) == GK_ERR_INVALID_ARGUMENT);
    CHECK(abi->next(NULL, 0, &d) == GK_ERR_NULL_POINTER);
    abi->sched_release(s);

    /* The full struct: max_chunks_in_flight = 1 is read, so no chunk goes out behind the first. */
    gk_sched_config full = {sizeof(gk_sched_config), GK_CLOCK_SIMULATED, 0.9, 250 * US, 50 * US, 0.2, 0, 1};
    CHECK(abi->sched_create(&full, &s) == GK_OK && s != NULL);
    CHECK(abi->register_stream(s, &rt, &audio, NULL) == GK_OK);
    CHECK(abi->register_stream(s, &tp, &bulk, NULL) == GK_OK);
    CHECK(abi->submit(s, bulk, 0, &t_bulk, NULL) == GK_OK);
    CHECK(abi->next(s, 0, &d) == GK_OK && d.kind == GK_DECISION_LAUNCH && d.chunk_end == 2);
    CHECK(abi->next(s, 0, &d) == GK_OK && d.kind == GK_DECISION_IDLE);
    abi->sched_release(s);

    gk_pool_config pc = {sizeof(gk_pool_config), 4, 256, 4096, 0};
    gk_pool *p = NULL;
    CHECK(abi->pool_create(&pc, &p) == GK_OK && p != NULL);
    gk_pool_grant g;
    CHECK(abi->pool_acquire_block(p, 1000, &g) == GK_OK);
    CHECK(g.bytes == 1024 && g.reused == 0);
    uint64_t first = g.block;
    uint32_t to_free = 99;
    CHECK(abi->pool_release_block(p, first, &to_free) == GK_OK && to_free == 0);
    CHECK(abi->pool_acquire_block(p, 900, &g) == GK_OK);
    CHECK(g.block == first && g.reused == 1);
    CHECK(abi->pool_release_block(p, first, NULL) == GK_OK);
    CHECK(abi->pool_trim(p, 0, &to_free) == GK_OK && to_free == 1);
    uint64_t ids[4] = {0};
    uint32_t n = 0;
    CHECK(abi->pool_take_to_free(p, ids, 4, &n) == GK_OK && n == 1 && ids[0] == first);
    gk_pool_stats ps;
    CHECK(abi->pool_stats(p, &ps) == GK_OK);
    CHECK(ps.hits == 1 && ps.misses == 1 && ps.evictions == 1 && ps.bytes_cached == 0 && ps.to_free == 0);
    abi->pool_release(p);
    return 0;
}

/* Read a scheduler that Python owns (Scheduler.capsule()) and submit one block to it. */
int gk_abi_shared(const gk_sched_abi_v1 *abi, gk_sched *s, uint32_t stream, uint64_t *out_completed,
                  uint64_t *out_task, char *msg, size_t cap) {
    abi->sched_retain(s);
    gk_stream_stats st;
    CHECK(abi->stream_stats(s, stream, &st) == GK_OK);
    *out_completed = st.completed;
    CHECK(abi->submit(s, stream, GK_TIME_NOW, out_task, NULL) == GK_OK);
    abi->sched_release(s);
    return 0;
}
