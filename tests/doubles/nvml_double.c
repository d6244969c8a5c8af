/*
 * A stand-in libnvidia-ml.so.1 for warptd's tests and benchmarks.
 *
 * The real, unmodified nvidia-ml-py (pynvml) loads this library and calls its C functions through
 * its own ctypes structs and versioned names, so what pynvml does with the answers is pynvml's own
 * code. Written from the NVML API reference and nvml.h as pynvml 13.x mirrors them; no NVIDIA code.
 *
 * The state of the simulated driver lives in a file mapped MAP_SHARED (layout: struct state, mirrored
 * by tests/doubles/nvml.py), so a test can change a GPU while a daemon in another process reads it.
 * The library maps the file named by double_attach() or, at the first nvmlInit, by the environment
 * variable WARPTD_NVML_DOUBLE_STATE.
 *
 * Where the driver surprises, so does this library:
 *  - nvmlDeviceGetMemoryInfo (v1) counts driver-reserved memory as used; _v2 reports it apart;
 *  - nvmlDeviceGetPowerUsage is the average of the last second (Ampere and newer), while the field
 *    NVML_FI_DEV_POWER_INSTANT is the instantaneous draw;
 *  - nvmlDeviceGetCount_v2 counts GPUs whose handle is then refused (NO_PERMISSION, GPU_IS_LOST);
 *  - any function can answer any return code per GPU (DEPRECATED, NOT_SUPPORTED ...), and the
 *    OLD_DRIVER build (an R470-era driver) lacks the functions added since, so pynvml raises
 *    FUNCTION_NOT_FOUND for them;
 *  - nvmlShutdown to a zero reference count frees every event set: a wait on one afterwards is
 *    counted as a use after free (state.use_after_free), which a driver would not survive;
 *  - field ids are numbered by the driver branch that state.driver_version names (see numberings[]):
 *    an id past that header's NVML_FI_MAX answers INVALID_ARGUMENT in its value, the clock-event
 *    durations and power smoothing swap places between R580 and R590, and each value carries the
 *    latency the driver took to read it (nvmlFieldValue_t.latencyUsec), which the call really spends.
 *  - GPM samples see counters the driver refreshes at most every 100 ms: two samples closer than
 *    that answer NaN utilizations and zero or inflated throughputs, with SUCCESS (nv-gpm).
 *  - every call charges what its GPU's state says it costs, as CPU burned in the calling thread (a
 *    firmware round trip is system time in the caller, not a wait): by default what a real H200
 *    (driver 580.159.04, GSP firmware) charged, 2.9 ms for the energy counter, 0.58 ms per
 *    throttle-time group ... (tests/doubles/nvml.py writes them: PRICES_US; shared/notes/real-h200.md);
 *    the energy counter, the instant power and the 1 s average (fields 83, 186, 185) refresh every
 *    100 ms, nvmlDeviceGetPowerUsage every 50 ms (the state's refresh_ns), so a read between two
 *    refreshes sees the last one.
 *  - a capture's answers (nv-replay): field values and GPM metrics by id answer as a capture recorded
 *    them (tests/doubles/capture_double.py writes them), counters moving at its rates.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_GPUS 64
#define MAX_MIG 7
#define MAX_EVENTS 64
#define MAX_PROCS 80
#define MAX_FIELD 320
#define POWER_HISTORY 32
#define MAX_UTIL_SAMPLES 128 /* nv-processes: scripted per-process utilization samples per GPU */
#ifdef OLD_DRIVER
#define FIELD_IDS 160 /* an R470-era NVML_FI_MAX: later ids answer INVALID_ARGUMENT */
#else
#define FIELD_IDS MAX_FIELD
#endif
#define MAX_SETS 64
/* --- nv-health: array sizes --- */
#define MAX_LINKS 18 /* NVLinks of an H100 SXM */
#define MAX_FANS 4
/* --- end nv-health --- */
#define ENERGY_ANSWERS 32 /* the energy counter's answers kept for tests */
#define BATCH_TIMES 64    /* the times of the last field batches kept for benchmarks */
/* --- nv-replay: sizes --- */
#define MAX_REPLAY_FIELDS 384 /* a capture's field answers per GPU, by id and scope */
#define REFRESHES 5
enum { R_ENERGY, R_INSTANT, R_AVERAGE, R_POWER_USAGE, R_GPM }; /* refresh_ns: energy, field 186, field 185,
                                                                * nvmlDeviceGetPowerUsage, GPM counters */
/* --- end nv-replay --- */
#define STATE_MAGIC 0x4e564d4cu /* "NVML" */
#define STATE_VERSION 8u

/* Return codes and constants, as nvml.h defines them. */
enum {
    SUCCESS = 0, ERROR_UNINITIALIZED = 1, ERROR_INVALID_ARGUMENT = 2, ERROR_NOT_SUPPORTED = 3,
    ERROR_NOT_FOUND = 6, ERROR_INSUFFICIENT_SIZE = 7, ERROR_TIMEOUT = 10, ERROR_LIBRARY_NOT_FOUND = 12,
    ERROR_GPU_IS_LOST = 15, ERROR_ARGUMENT_VERSION_MISMATCH = 25, ERROR_UNKNOWN = 999,
};
enum { VALUE_UINT = 1, VALUE_ULL = 3 };
#define MEMORY_V2 0x02000028u
#define NOT_COUNTED UINT64_MAX /* a violation counter this GPU does not keep */
#define FI_MEMORY_TEMP 82
#define FI_TOTAL_ENERGY_CONSUMPTION 83 /* mJ since the driver was loaded: nvmlDeviceGetTotalEnergyConsumption */
#define FI_POWER_AVERAGE 185
#define FI_POWER_INSTANT 186
#define FI_PERF_POLICY_POWER 74
#define FI_PERF_POLICY_THERMAL 75
#define FI_PERF_POLICY_SYNC_BOOST 76
#define FI_RESET_STATUS 226           /* 1 = the GPU needs a reset (deprecated by 230 in R570) */
#define FI_DRAIN_AND_RESET_STATUS 227 /* 1 = drain the GPU, then reset it (deprecated by 230) */
#define FI_GPU_RECOVERY_ACTION 230

/* Every function of this library, for per-GPU return codes and call counts (order = ids). */
#define FUNCTIONS(X)                                                                              \
    X(nvmlInitWithFlags) X(nvmlInit_v2) X(nvmlShutdown) X(nvmlErrorString)                        \
    X(nvmlSystemGetDriverVersion) X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2)        \
    X(nvmlDeviceGetName) X(nvmlDeviceGetUUID) X(nvmlDeviceGetCudaComputeCapability)                \
    X(nvmlDeviceGetPciInfo_v3) X(nvmlDeviceGetMaxPcieLinkGeneration) X(nvmlDeviceGetMemoryInfo)    \
    X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetUtilizationRates) X(nvmlDeviceGetTemperature)     \
    X(nvmlDeviceGetPowerUsage) X(nvmlDeviceGetEnforcedPowerLimit)                                  \
    X(nvmlDeviceGetTotalEnergyConsumption) X(nvmlDeviceGetClockInfo)                               \
    X(nvmlDeviceGetSupportedClocksEventReasons) X(nvmlDeviceGetCurrentClocksEventReasons)          \
    X(nvmlDeviceGetSupportedClocksThrottleReasons) X(nvmlDeviceGetCurrentClocksThrottleReasons)    \
    X(nvmlDeviceGetViolationStatus) X(nvmlDeviceGetFieldValues) X(nvmlDeviceGetSupportedEventTypes) \
    X(nvmlEventSetCreate) X(nvmlDeviceRegisterEvents) X(nvmlEventSetWait_v2) X(nvmlEventSetFree)   \
    X(nvmlDeviceGetComputeRunningProcesses_v2) X(nvmlDeviceGetComputeRunningProcesses_v3)          \
    X(nvmlDeviceGetMigMode) X(nvmlDeviceGetMaxMigDeviceCount) X(nvmlDeviceGetMigDeviceHandleByIndex) \
    X(nvmlDeviceIsMigDeviceHandle) X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)               \
    /* --- nv-processes: per-process utilization --- */                                           \
    X(nvmlDeviceGetProcessUtilization) X(nvmlDeviceGetProcessesUtilizationInfo)                    \
    /* --- nv-gpm: GPM and MIG instances --- */                                                  \
    X(nvmlGpmQueryDeviceSupport) X(nvmlGpmSampleAlloc) X(nvmlGpmSampleFree) X(nvmlGpmSampleGet)    \
    X(nvmlGpmMigSampleGet) X(nvmlGpmMetricsGet) X(nvmlDeviceGetGpuInstanceId)                      \
    X(nvmlDeviceGetComputeInstanceId)                                                        \
    NV_HEALTH_FUNCTIONS(X)

/* --- nv-health: functions --- */
#define NV_HEALTH_FUNCTIONS(X)                                                                    \
    X(nvmlDeviceGetNumFans) X(nvmlDeviceGetFanSpeed_v2) X(nvmlDeviceGetEncoderUtilization)         \
    X(nvmlDeviceGetDecoderUtilization) X(nvmlDeviceGetJpgUtilization) X(nvmlDeviceGetOfaUtilization) \
    X(nvmlDeviceGetPerformanceState)                                                              \
    X(nvmlDeviceGetPcieReplayCounter) X(nvmlDeviceGetRemappedRows) NV_FIELDS_FUNCTIONS(X)
/* --- end nv-health --- */
/* --- nv-fields: functions --- */
#define NV_FIELDS_FUNCTIONS(X) X(nvmlDeviceGetNvLinkErrorCounter) X(nvmlDeviceGetNvLinkState) \
    X(nvmlDeviceGetGpuInstanceProfileInfoV) X(nvmlDeviceGetPcieThroughput) \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3) X(nvmlDeviceGetGpuUptime_v1)
/* --- end nv-fields --- */

#define AS_ID(name) FN_##name,
enum { FUNCTIONS(AS_ID) FN_COUNT };
#define AS_NAME(name) #name,
static const char *function_names[] = {FUNCTIONS(AS_NAME)};
#define MAX_FN 64

struct power_point { uint64_t t_ns; uint32_t mw; uint32_t pad; };
/* --- nv-gpm: GPM counters --- */
#define GPM_ACTIVE 31   /* activity counters, by the slot gpm_slot() gives a metric id */
#define GPM_LINKS 18
#define GPM_METRIC_IDS 480
#define GPM_ANSWERS 8   /* scripted metric answers per GPU (a driver answering garbage) */
#define GPM_REFRESH_NS 100000000ull /* nvml.h: samples under 100 ms apart see the same counters */
/* A GPU's (or GPU instance's) cumulative GPM counters, scripted by the tests: the driver derives each
 * metric from the difference between two samples, so a metric covers the period between them. */
struct gpm_counters {
    uint64_t elapsed;             /* cycles elapsed: the denominator of every activity ratio */
    uint64_t active[GPM_ACTIVE];  /* cycles each unit was active (0-100 % of elapsed over a period) */
    uint64_t pcie[2];             /* bytes: tx, rx */
    uint64_t nvlink[GPM_LINKS][2]; /* bytes per link: rx, tx */
};
/* --- end nv-gpm --- */
struct event { uint64_t type; uint64_t data; };
struct process { uint32_t pid; uint32_t sm; uint64_t used; }; /* sm: % it keeps the SMs busy (live samples) */
/* --- nv-processes: one scripted per-process utilization sample (timestamp in µs, percents) --- */
struct util_sample { uint64_t t_us; uint32_t pid, sm, mem, enc, dec, pad; };

/* One GPU, in NVML's own units: bytes, %, °C, mW, mJ, MHz, ns. Mirrored by GpuState in nvml.py. */
struct gpu {
    char name[96];
    char uuid[96];
    char bus_id[32];
    uint64_t memory_total, memory_used, memory_reserved;
    uint32_t util_gpu, util_memory, temperature, memory_temperature;
    uint32_t power_limit_mw, pcie_gen;
    int32_t cc_major, cc_minor;
    uint64_t energy_mj;
    uint32_t power_count, power_head; /* ring of instant power changes, newest at head-1 */
    struct power_point power[POWER_HISTORY];
    uint32_t clocks_mhz[4]; /* NVML_CLOCK_GRAPHICS, SM, MEM, VIDEO; 0 = not supported */
    uint64_t supported_reasons, current_reasons;
    uint64_t violation_ns[3];   /* NVML_PERF_POLICY_POWER, THERMAL, SYNC_BOOST */
    uint64_t clock_event_ns[3]; /* SW thermal, HW thermal, HW power brake: fields 251-253 or 269-271 */
    uint64_t supported_events;
    uint32_t event_head, event_tail; /* the driver's event queue of this GPU */
    struct event events[MAX_EVENTS];
    uint32_t process_count, pad0;
    struct process processes[MAX_PROCS];
    uint32_t mig_mode, mig_count;
    char mig_uuid[MAX_MIG][96];
    int32_t handle_error; /* nvmlDeviceGetHandleByIndex_v2 answers this (e.g. NO_PERMISSION) */
    int32_t lost;         /* every call answers GPU_IS_LOST */
    int32_t hang, release; /* while hang && !release, every call blocks (up to 30 s) */
    int32_t live;         /* energy advances with time at the instant power */
    int32_t field_latency_us; /* a slow driver: this many µs more per field value read */
    uint64_t live_since_ns;
    int32_t fn_error[MAX_FN];          /* a return code per function, 0 = answer normally */
    uint8_t field_unsupported[MAX_FIELD]; /* per field id: nvmlReturn NOT_SUPPORTED in the value */
    /* --- nv-processes: the driver's per-process utilization samples, oldest first; or, with
     * util_window_us, live ones: each window, one per listed process with a nonzero sm --- */
    uint32_t util_sample_count, util_window_us;
    struct util_sample util_samples[MAX_UTIL_SAMPLES];
    /* --- nv-gpm: GPM and MIG instances --- */
    uint32_t gpm_supported, pad_gpm;   /* nvmlGpmQueryDeviceSupport's isSupportedDevice */
    struct gpm_counters gpm;           /* the whole GPU */
    struct gpm_counters mig_gpm[MAX_MIG]; /* per MIG device: its GPU instance */
    uint32_t mig_gi[MAX_MIG], mig_ci[MAX_MIG];
    uint64_t mig_memory_total[MAX_MIG], mig_memory_used[MAX_MIG];
    char mig_name[MAX_MIG][96];        /* what nvmlDeviceGetName answers on the MIG handle */
    uint8_t gpm_unsupported[GPM_METRIC_IDS]; /* per metric id: 1, NOT_SUPPORTED; 2-255, that nvmlReturn */
    uint32_t gpm_metric_max; /* the driver header's NVML_GPM_METRIC_MAX: a larger id fails the call */
    /* What the driver's samples see: the counters as of its last refresh, at most every 100 ms. */
    uint64_t gpm_refreshed_ns, gpm_refresh; /* when (CLOCK_MONOTONIC), and which refresh (1, 2 ...) */
    struct gpm_counters gpm_seen, mig_gpm_seen[MAX_MIG];
    /* Traffic running with the time: bytes/s from gpm_rate_since_ns to gpm_rate_until_ns (0: on),
     * on top of the counters of gpm. */
    double gpm_pcie_rate[2];                  /* tx, rx */
    double gpm_nvlink_rate[GPM_LINKS][2];     /* per link: rx, tx */
    uint64_t gpm_rate_since_ns, gpm_rate_until_ns;
    uint64_t gpm_close_pairs; /* nvmlGpmMetricsGet calls on two samples under 100 ms apart */
    uint32_t gpm_answer_count, pad_gpm_answer; /* scripted answers: the metric's value, with SUCCESS */
    struct gpm_answer { uint32_t metric_id, pad; double value; } gpm_answers[GPM_ANSWERS];
    /* --- end nv-gpm --- */
    /* --- nv-health: health, traffic and the rest of nvidia-smi --- */
    uint64_t ecc_volatile[2];  /* fields 3 SBE, 4 DBE: since the driver loaded (reset by a reload) */
    uint64_t ecc_aggregate[2]; /* fields 5 SBE, 6 DBE: the GPU's lifetime */
    uint64_t pcie_bytes[2];    /* fields 197 TX, 198 RX (R550+): bytes */
    uint64_t nvlink_errors[MAX_LINKS][4]; /* per link: CRC flit, CRC data, replay, recovery */
    uint64_t nvlink_kib[MAX_LINKS][2];    /* fields 138 TX, 139 RX with scopeId = link: KiB */
    uint32_t retires_pages;    /* pre-Ampere: the page-retirement fields answer, the row-remapping ones not */
    uint32_t remapped[4];      /* fields 142-145: correctable, uncorrectable, pending, failure */
    uint32_t retired[3];       /* fields 29 SBE, 30 DBE, 31 pending */
    uint32_t pcie_replays;     /* field 94 and nvmlDeviceGetPcieReplayCounter */
    uint32_t recovery_action;  /* field 230 (R570+): nvmlDeviceGpuRecoveryAction_t; before, 226/227 */
    uint32_t nvlink_count;     /* field 91 */
    uint32_t fan_count;        /* 0: no fans (nvmlDeviceGetNumFans answers NOT_SUPPORTED) */
    uint32_t fan_percent[MAX_FANS];
    uint32_t encoder_util, decoder_util; /* percent over the sampling period below */
    uint32_t pstate;           /* 0..15, 32 = NVML_PSTATE_UNKNOWN */
    uint32_t nv_health_pad;
    int32_t nvlink_error_code[MAX_LINKS]; /* per link: what its nvmlDeviceGetNvLinkErrorCounter answers
                                           * instead (NOT_SUPPORTED: an inactive link); 0 = its count */
    /* --- end nv-health --- */
    uint32_t power_smoothing; /* the power-smoothing fields answer (GB200-class); 0: NOT_SUPPORTED */
    /* mJ that nvmlDeviceGetTotalEnergyConsumption answers beyond field 83 (a driver whose two paths to
     * one counter disagree); 0: the same counter, as a real driver's */
    int32_t energy_call_offset_mj;
    /* The media engines the GPU has (NVDEC, NVJPG, OFA, NVENC: an H100/H200 7, 7, 1, 0), which the
     * whole-GPU instance profile counts while MIG is on; GPM answers 0 for the ones it lacks. */
    uint32_t media_engines[4];
    /* The energy counter's last answers (field 83 or the call), for tests: when (CLOCK_MONOTONIC ns)
     * and what (mJ), newest at energy_answer_head - 1. */
    uint32_t energy_answer_head, pad_answers;
    struct energy_answer { uint64_t t_ns, mj; } energy_answers[ENERGY_ANSWERS];
    /* Power of the module (a Grace Hopper's, CPU included) and of the memory, which fields 185/186
     * answer with scopeId NVML_POWER_SCOPE_MODULE (1) / _MEMORY (2); 0: NOT_SUPPORTED (an x86 H200). */
    uint32_t module_power_mw, memory_power_mw;
    /* How late the driver's 1 s average (field 185, nvmlDeviceGetPowerUsage) is besides its refresh:
     * the second it averages ends this many ms before the refresh (0, as modelled for the H200). */
    uint32_t average_lag_ms, pad_lag;
    /* When the driver last initialised this GPU (CLOCK_BOOTTIME ns): nvmlDeviceGetGpuUptime_v1 counts
     * from it; a driver reload (FakeGpu.reload_driver) sets it anew. */
    uint64_t driver_loaded_ns;
    /* nvmlDeviceGetJpgUtilization, nvmlDeviceGetOfaUtilization: percent, each kind's engines averaged
     * (as encoder_util and decoder_util); FakeGpu.busy_engines sets the four as the driver counts them */
    uint32_t jpeg_util, ofa_util;
    /* When the last field batches were read (CLOCK_MONOTONIC ns), newest at batch_head - 1: what the
     * values a reader published were as of, for benchmarks comparing them with the load. */
    uint32_t batch_head, pad_batches;
    uint64_t batch_ns[BATCH_TIMES];
    /* --- nv-replay: prices, refresh periods and a capture's answers (tests/doubles/nvml.py writes the
     * H200's as defaults, tests/doubles/capture_double.py a capture's) --- */
    uint32_t price_us[MAX_FN];          /* CPU µs each call of a function burns (field batches apart) */
    uint32_t query_price_us[16];        /* a field batch: once per firmware query it makes (Q_*) ... */
    uint32_t field_price_us[MAX_FIELD]; /* ... and per field answered by no such query */
    uint32_t gpm_metrics_base_us, gpm_metric_price_us; /* nvmlGpmMetricsGet: a base, and per metric */
    uint64_t refresh_ns[REFRESHES];     /* how often the driver refreshes each value (R_*) */
    int32_t latency_of_us[MAX_FIELD];   /* a field's latencyUsec; -1: the model's (field_latency) */
    uint32_t energy_rate_mw;            /* the energy counter runs at this power; 0: the instant power */
    uint32_t average_mw;                /* field 185 (scope 0) answers this; 0: the instant power's average */
    uint32_t power_usage_mw;            /* nvmlDeviceGetPowerUsage answers this; 0: the same average */
    uint32_t pci_device_id;             /* nvmlPciInfo_t.pciDeviceId; 0: an H100 SXM5's */
    uint32_t pci_subsystem_id;
    uint32_t replay_field_count;        /* replay_fields in use, sorted by id then scope */
    uint64_t replay_since_ns;           /* the replayed counters run at their rates from here (MONOTONIC) */
    uint16_t replay_field_first[MAX_FIELD]; /* per field id: 1 + its first entry in replay_fields; 0: none */
    struct replay_field { uint32_t id, scope; int32_t ret; uint32_t type; uint64_t value; double rate; }
        replay_fields[MAX_REPLAY_FIELDS];
    /* GPM metrics per instance (0: the GPU, 1 + k: MIG device k's GPU instance): nvmlReturn + 1 (0: the
     * model answers) and the value */
    int16_t gpm_replay_ret[1 + MAX_MIG][GPM_METRIC_IDS];
    double gpm_replay_value[1 + MAX_MIG][GPM_METRIC_IDS];
    uint8_t field_asked[MAX_FIELD]; /* per field id: asked in some batch (what a capture must hold) */
    /* --- end nv-replay --- */
    /* --- nv-answers: the fields answered as given (FIELD_ANSWERS of tests/doubles/nvml.py), by id at
     * scope 0: the value, and 1 + its nvmlValueType_t (0: the model answers) --- */
    uint64_t field_answer[MAX_FIELD];
    uint8_t field_answer_type[MAX_FIELD];
};

struct state {
    uint32_t magic, version;
    uint32_t gpu_count, library_missing;
    int32_t init_error, pad;
    char driver_version[80];
    int32_t order[MAX_GPUS]; /* NVML index -> slot in gpus[] */
    uint64_t calls[MAX_FN];
    uint64_t use_after_free;
    int64_t initialised;
    struct gpu gpus[MAX_GPUS];
    /* --- nv-replay: the library's own versions ("" / 0: the driver's library lacks the call) --- */
    char nvml_version[80];
    int32_t cuda_driver_version; /* 13000 = CUDA 13.0 */
    int32_t pad_replay;
    /* --- end nv-replay --- */
};

/* Handles point into these: one per slot (a GPU keeps its handle wherever its index moves). */
struct device_tag { int slot; int mig; };
static struct device_tag gpu_tags[MAX_GPUS];
static struct device_tag mig_tags[MAX_GPUS][MAX_MIG];
/* Event sets: registered masks per slot; valid until freed or torn down by the last nvmlShutdown. */
struct event_set { int used; int torn_down; const void *owner; uint64_t mask[MAX_GPUS]; };
static struct event_set sets[MAX_SETS];

_Static_assert(FN_COUNT <= MAX_FN, "raise MAX_FN");

static struct state *st;

static uint64_t now_ns(int clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* --- prices: what each read costs, as a real H200 charged it (driver 580.159.04, GSP firmware,
 * nvidia-ml-py 13.615.71; shared/notes/real-h200.md: process CPU time, median of 100 calls from Python).
 * The CPU is burned in the calling thread, as the driver's system time is. WARPTD_NVML_DOUBLE_PRICES=0
 * turns prices off (a bench comparing with trees whose double was free), and
 * WARPTD_NVML_DOUBLE_SPEND_LATENCY=0 the rest of a field batch's wall time (its latencyUsec beyond
 * the CPU burned, spent asleep). --- */
static int setting_on(const char *name) {
    const char *setting = getenv(name);
    return !(setting && strcmp(setting, "0") == 0);
}

static int charges(void) {
    static int on = -1;
    if (on < 0) on = setting_on("WARPTD_NVML_DOUBLE_PRICES");
    return on;
}

static int spends_latency(void) {
    static int spends = -1;
    if (spends < 0) spends = setting_on("WARPTD_NVML_DOUBLE_SPEND_LATENCY");
    return spends;
}

/* Spend ``us`` µs of this thread's CPU. */
static void burn_us(uint64_t us) {
    if (!us || !charges()) return;
    uint64_t until = now_ns(CLOCK_THREAD_CPUTIME_ID) + us * 1000ull;
    while (now_ns(CLOCK_THREAD_CPUTIME_ID) < until) {
    }
}

/* nv-replay: what each call costs and how often each value refreshes are the GPU's state (price_us,
 * query_price_us, field_price_us, gpm_*_us, refresh_ns), written by tests/doubles/nvml.py (PRICES_US:
 * the H200's, per call) or from a capture. A read between two refreshes sees the last one. */
static uint64_t refreshed_at(uint64_t period) {
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    return period ? now - now % period : now;
}

/* Map the state file; called by the tests (ctypes) or at the first nvmlInit from the environment. */
int double_attach(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    void *mapped = mmap(NULL, sizeof(struct state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) return -1;
    if (((struct state *)mapped)->magic != STATE_MAGIC || ((struct state *)mapped)->version != STATE_VERSION) {
        munmap(mapped, sizeof(struct state));
        return -2;
    }
    /* An earlier mapping stays: a read still blocked in it (a hung GPU of an earlier test) must not
     * fault. Event sets stay too: they belong to this process's NVML, not to one state file. */
    st = mapped;
    return 0;
}

size_t double_state_size(void) { return sizeof(struct state); }
size_t double_gpu_size(void) { return sizeof(struct gpu); }
/* The live event sets of this process, for tests: the set's address (0 = free slot) and its masks. */
void *double_event_set(int i) { /* only sets created on the state attached now (this test's driver) */
    return i >= 0 && i < MAX_SETS && sets[i].used && sets[i].owner == st ? &sets[i] : NULL;
}
uint64_t double_event_mask(int i, int slot) { return sets[i].mask[slot]; }
int double_function_count(void) { return FN_COUNT; }
const char *double_function_name(int id) { return id >= 0 && id < FN_COUNT ? function_names[id] : NULL; }

static void count(int fn) {
    if (st) __atomic_fetch_add(&st->calls[fn], 1, __ATOMIC_RELAXED);
}

static int ready(int fn) {
    count(fn);
    if (!st || st->initialised <= 0) return ERROR_UNINITIALIZED;
    return SUCCESS;
}

/* The GPU a handle names, after the checks every device call makes; *ret is its return code. */
static struct gpu *device(int fn, void *handle, int *ret) {
    *ret = ready(fn);
    if (*ret) return NULL;
    struct device_tag *tag = handle;
    if (!tag || tag->slot < 0 || tag->slot >= MAX_GPUS) {
        *ret = ERROR_INVALID_ARGUMENT;
        return NULL;
    }
    struct gpu *g = &st->gpus[tag->slot];
    int listed = 0;
    for (uint32_t i = 0; i < st->gpu_count; i++) listed |= st->order[i] == tag->slot;
    if (!listed) { /* the GPU left the bus: its old handle answers GPU_IS_LOST */
        *ret = ERROR_GPU_IS_LOST;
        return NULL;
    }
    for (int waited = 0; g->hang && !g->release && waited < 3000; waited++) sleep_ms(10);
    if (g->lost) *ret = ERROR_GPU_IS_LOST;
    else if (g->fn_error[fn]) *ret = g->fn_error[fn];
    if (*ret) return NULL;
    if (fn != FN_nvmlDeviceGetFieldValues) burn_us(g->price_us[fn]); /* a batch is priced by its fields */
    return g;
}

#define DEVICE_CALL(name, handle)               \
    int ret;                                    \
    struct gpu *g = device(FN_##name, handle, &ret); \
    if (!g) return ret

static int copy_string(char *out, unsigned length, const char *value) {
    if (!out) return ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return SUCCESS;
}

/* -- init ------------------------------------------------------------------------------------- */
int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (!st) {
        const char *path = getenv("WARPTD_NVML_DOUBLE_STATE");
        if (!path || double_attach(path) != 0) return ERROR_LIBRARY_NOT_FOUND;
    }
    count(FN_nvmlInitWithFlags);
    if (st->library_missing) return ERROR_LIBRARY_NOT_FOUND;
    if (st->init_error) return st->init_error;
    __atomic_fetch_add(&st->initialised, 1, __ATOMIC_SEQ_CST);
    return SUCCESS; /* sets torn down by an earlier shutdown stay dead until their slot is reused */
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    int ret = ready(FN_nvmlShutdown);
    if (ret) return ret;
    if (__atomic_sub_fetch(&st->initialised, 1, __ATOMIC_SEQ_CST) == 0) {
        for (int i = 0; i < MAX_SETS; i++) /* the last shutdown frees every event set */
            if (sets[i].used) sets[i].used = 0, sets[i].torn_down = 1;
    }
    return SUCCESS;
}

const char *nvmlErrorString(int result) {
    count(FN_nvmlErrorString);
    switch (result) {
    case SUCCESS: return "Success";
    case ERROR_UNINITIALIZED: return "Uninitialized";
    case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case ERROR_NOT_FOUND: return "Not Found";
    case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case ERROR_TIMEOUT: return "Timeout";
    case ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case ERROR_GPU_IS_LOST: return "GPU is lost";
    case 26: return "Deprecated";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    int ret = ready(FN_nvmlSystemGetDriverVersion);
    return ret ? ret : copy_string(version, length, st->driver_version);
}

/* --- nv-replay: NVML's and the CUDA driver's versions (not counted per function: no GPU's) --- */
int nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!st || st->initialised <= 0) return ERROR_UNINITIALIZED;
    if (!st->nvml_version[0]) return ERROR_NOT_SUPPORTED;
    return copy_string(version, length, st->nvml_version);
}

int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!st || st->initialised <= 0) return ERROR_UNINITIALIZED;
    if (!version) return ERROR_INVALID_ARGUMENT;
    if (!st->cuda_driver_version) return ERROR_NOT_SUPPORTED;
    *version = st->cuda_driver_version;
    return SUCCESS;
}
/* --- end nv-replay --- */

int nvmlDeviceGetCount_v2(unsigned int *n) {
    int ret = ready(FN_nvmlDeviceGetCount_v2);
    if (ret) return ret;
    *n = st->gpu_count; /* refused and lost GPUs are counted too, as the driver does */
    return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    int ret = ready(FN_nvmlDeviceGetHandleByIndex_v2);
    if (ret) return ret;
    if (index >= st->gpu_count) return ERROR_INVALID_ARGUMENT;
    int slot = st->order[index];
    struct gpu *g = &st->gpus[slot];
    if (g->lost) return ERROR_GPU_IS_LOST;
    if (g->handle_error) return g->handle_error;
    if (g->fn_error[FN_nvmlDeviceGetHandleByIndex_v2]) return g->fn_error[FN_nvmlDeviceGetHandleByIndex_v2];
    gpu_tags[slot].slot = slot;
    gpu_tags[slot].mig = -1;
    *handle = &gpu_tags[slot];
    return SUCCESS;
}

/* -- identity ---------------------------------------------------------------------------------- */
int nvmlDeviceGetName(void *h, char *name, unsigned int length) {
    DEVICE_CALL(nvmlDeviceGetName, h);
    struct device_tag *tag = h; /* nv-gpm: a MIG handle answers its MIG device's name */
    return copy_string(name, length, tag->mig >= 0 ? g->mig_name[tag->mig] : g->name);
}

int nvmlDeviceGetUUID(void *h, char *uuid, unsigned int length) {
    DEVICE_CALL(nvmlDeviceGetUUID, h);
    struct device_tag *tag = h;
    return copy_string(uuid, length, tag->mig >= 0 ? g->mig_uuid[tag->mig] : g->uuid);
}

int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    DEVICE_CALL(nvmlDeviceGetCudaComputeCapability, h);
    *major = g->cc_major, *minor = g->cc_minor;
    return SUCCESS;
}

struct pci_info { /* nvmlPciInfo_t */
    char bus_id_legacy[16];
    uint32_t domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};

int nvmlDeviceGetPciInfo_v3(void *h, struct pci_info *pci) {
    DEVICE_CALL(nvmlDeviceGetPciInfo_v3, h);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->bus_id, sizeof pci->bus_id, "%s", g->bus_id);
    snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%s", g->bus_id + 4);
    unsigned domain = 0, bus = 0, dev = 0;
    sscanf(g->bus_id, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain, pci->bus = bus, pci->device = dev;
    pci->pci_device_id = g->pci_device_id ? g->pci_device_id : 0x233010de; /* H100 SXM5 */
    pci->pci_subsystem_id = g->pci_subsystem_id;
    return SUCCESS;
}

int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned int *gen) {
    DEVICE_CALL(nvmlDeviceGetMaxPcieLinkGeneration, h);
    *gen = g->pcie_gen;
    return SUCCESS;
}

/* -- memory, utilization, temperature ----------------------------------------------------------- */
struct memory_v1 { uint64_t total, free, used; };
struct memory_v2 { uint32_t version; uint32_t pad; uint64_t total, reserved, free, used; };

/* --- nv-gpm: a MIG handle answers its MIG device's memory (no reserved part) --- */
static void memory_of(const struct gpu *g, void *h, uint64_t *total, uint64_t *used, uint64_t *reserved) {
    int mig = ((struct device_tag *)h)->mig;
    *total = mig >= 0 ? g->mig_memory_total[mig] : g->memory_total;
    *used = mig >= 0 ? g->mig_memory_used[mig] : g->memory_used;
    *reserved = mig >= 0 ? 0 : g->memory_reserved;
}

int nvmlDeviceGetMemoryInfo(void *h, struct memory_v1 *m) {
    DEVICE_CALL(nvmlDeviceGetMemoryInfo, h);
    uint64_t total, used, reserved;
    memory_of(g, h, &total, &used, &reserved);
    m->total = total;
    m->used = used + reserved; /* v1 "used" includes what the driver reserves */
    m->free = total - m->used;
    return SUCCESS;
}

#ifndef OLD_DRIVER
int nvmlDeviceGetMemoryInfo_v2(void *h, struct memory_v2 *m) {
    DEVICE_CALL(nvmlDeviceGetMemoryInfo_v2, h);
    if (m->version != MEMORY_V2) return ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total, used, reserved;
    memory_of(g, h, &total, &used, &reserved);
    m->total = total;
    m->reserved = reserved;
    m->used = used;
    m->free = total - reserved - used;
    return SUCCESS;
}
#endif

int nvmlDeviceGetUtilizationRates(void *h, uint32_t *rates) {
    DEVICE_CALL(nvmlDeviceGetUtilizationRates, h);
    rates[0] = g->util_gpu, rates[1] = g->util_memory;
    return SUCCESS;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *temperature) {
    DEVICE_CALL(nvmlDeviceGetTemperature, h);
    if (sensor != 0) return ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU only */
    *temperature = g->temperature;
    return SUCCESS;
}

/* -- power and energy --------------------------------------------------------------------------- */
static uint32_t instant_mw(const struct gpu *g) {
    return g->power_count ? g->power[(g->power_head + POWER_HISTORY - 1) % POWER_HISTORY].mw : 0;
}

/* The instant power as of monotonic time ``t``: the newest change at or before it (the oldest value
 * kept stands for the time before the history). */
static uint32_t instant_mw_at(const struct gpu *g, uint64_t t) {
    uint32_t mw = 0;
    for (uint32_t k = 0; k < g->power_count; k++) {
        const struct power_point *p = &g->power[(g->power_head + POWER_HISTORY - 1 - k) % POWER_HISTORY];
        mw = p->mw;
        if (p->t_ns <= t) break;
    }
    return mw;
}

/* What field 186 answers: the instant power as of the driver's last refresh. */
static uint32_t refreshed_instant_mw(const struct gpu *g) {
    return instant_mw_at(g, refreshed_at(g->refresh_ns[R_INSTANT]));
}

/* The time-weighted mean of the instant power over the second before the driver's last refresh
 * (every ``period`` ns), average_lag_ms later besides: what Ampere+ drivers report. */
static uint32_t average_mw(const struct gpu *g, uint64_t period) {
    if (!g->power_count) return 0;
    uint64_t now = refreshed_at(period) - (uint64_t)g->average_lag_ms * 1000000ull;
    uint64_t window = 1000000000ull, start = now - window;
    double weighted = 0;
    uint64_t until = now;
    for (uint32_t k = 0; k < g->power_count && until > start; k++) {
        const struct power_point *p = &g->power[(g->power_head + POWER_HISTORY - 1 - k) % POWER_HISTORY];
        uint64_t from = p->t_ns > start ? p->t_ns : start;
        if (k == g->power_count - 1) from = start; /* the oldest value held before the history */
        if (until > from) { /* a change after the refresh is not seen yet: its segment is skipped */
            weighted += (double)p->mw * (double)(until - from);
            until = from;
        }
    }
    return (uint32_t)(weighted / (double)window + 0.5);
}

int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    DEVICE_CALL(nvmlDeviceGetPowerUsage, h);
    *mw = g->power_usage_mw ? g->power_usage_mw : average_mw(g, g->refresh_ns[R_POWER_USAGE]);
    return SUCCESS;
}

#ifndef OLD_DRIVER /* nvml.h of CUDA 13.5 (R610) */
/* nvmlGpuUptime_v1_t: the seconds since the driver initialised the GPU; 0 after a reload. */
int nvmlDeviceGetGpuUptime_v1(void *h, unsigned int *uptime) {
    DEVICE_CALL(nvmlDeviceGetGpuUptime_v1, h);
    if (!uptime) return ERROR_INVALID_ARGUMENT;
    uint64_t now = now_ns(CLOCK_BOOTTIME);
    *uptime = now > g->driver_loaded_ns ? (unsigned int)((now - g->driver_loaded_ns) / 1000000000ull) : 0;
    return SUCCESS;
}
#endif

int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned int *mw) {
    DEVICE_CALL(nvmlDeviceGetEnforcedPowerLimit, h);
    *mw = g->power_limit_mw;
    return SUCCESS;
}

/* The counter as of the driver's last refresh: what the GPU drew up to then, at its instant power.
 * Banked at each change of the power (energy_mj, at live_since_ns), so a change after the refresh
 * is taken back out: the energy drawn after the refresh, at the powers then, is not yet counted. */
static uint64_t energy_mj(const struct gpu *g) {
    uint64_t at = refreshed_at(g->refresh_ns[R_ENERGY]);
    double energy = (double)g->energy_mj;
    if (!g->live) return g->energy_mj;
    uint32_t mw = g->energy_rate_mw ? g->energy_rate_mw : instant_mw(g); /* nv-replay: a captured rate */
    if (at >= g->live_since_ns) return g->energy_mj + (uint64_t)((double)(at - g->live_since_ns) / 1e9 * mw);
    /* changes of the power after the refresh, newest first: each segment after it is taken out */
    for (uint32_t k = 0; k + 1 < g->power_count; k++) {
        const struct power_point *later = &g->power[(g->power_head + POWER_HISTORY - 1 - k) % POWER_HISTORY];
        const struct power_point *earlier = &g->power[(g->power_head + POWER_HISTORY - 2 - k) % POWER_HISTORY];
        if (later->t_ns <= at || later->t_ns > g->live_since_ns) break;
        uint64_t from = earlier->t_ns > at ? earlier->t_ns : at;
        energy -= (double)(later->t_ns - from) / 1e9 * earlier->mw;
        if (earlier->t_ns <= at) break;
    }
    return energy > 0 ? (uint64_t)(energy + 0.5) : 0;
}

/* The counter's answer to a read now, kept in the GPU's log of answers. */
static uint64_t answer_energy(struct gpu *g) {
    uint64_t mj = energy_mj(g);
    uint32_t slot = __atomic_fetch_add(&g->energy_answer_head, 1, __ATOMIC_RELAXED) % ENERGY_ANSWERS;
    g->energy_answers[slot].t_ns = now_ns(CLOCK_MONOTONIC);
    g->energy_answers[slot].mj = mj;
    return mj;
}

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    DEVICE_CALL(nvmlDeviceGetTotalEnergyConsumption, h);
    *mj = answer_energy(g) + (int64_t)g->energy_call_offset_mj;
    return SUCCESS;
}

/* -- clocks and clock-event (throttle) reasons ------------------------------------------------- */
int nvmlDeviceGetClockInfo(void *h, int type, unsigned int *mhz) {
    DEVICE_CALL(nvmlDeviceGetClockInfo, h);
    if (type < 0 || type > 3 || !g->clocks_mhz[type]) return ERROR_NOT_SUPPORTED;
    *mhz = g->clocks_mhz[type];
    return SUCCESS;
}

#define REASONS(name, field)                                   \
    int name(void *h, unsigned long long *reasons) {           \
        DEVICE_CALL(name, h);                                  \
        *reasons = g->field;                                   \
        return SUCCESS;                                        \
    }
#ifndef OLD_DRIVER /* the ClocksEvent names arrived in R535 */
REASONS(nvmlDeviceGetSupportedClocksEventReasons, supported_reasons)
REASONS(nvmlDeviceGetCurrentClocksEventReasons, current_reasons)
#endif
REASONS(nvmlDeviceGetSupportedClocksThrottleReasons, supported_reasons)
REASONS(nvmlDeviceGetCurrentClocksThrottleReasons, current_reasons)

struct violation { uint64_t reference_time, violation_time; };

int nvmlDeviceGetViolationStatus(void *h, int policy, struct violation *v) {
    DEVICE_CALL(nvmlDeviceGetViolationStatus, h);
    if (policy < 0 || policy > 2 || g->violation_ns[policy] == NOT_COUNTED) return ERROR_NOT_SUPPORTED;
    v->reference_time = now_ns(CLOCK_REALTIME) / 1000; /* µs, per the header */
    v->violation_time = g->violation_ns[policy];
    return SUCCESS;
}

struct field_value { /* nvmlFieldValue_t */
    uint32_t field_id, scope_id;
    int64_t timestamp, latency_usec;
    uint32_t value_type, nvml_return;
    uint64_t value;
};

/* --- nv-fields: how each driver branch numbers its field ids (nvml.h of that branch) --- */
struct numbering {
    int since;                /* the first driver (major * 1000 + minor version) numbering its ids so */
    uint32_t fi_max;          /* that header's NVML_FI_MAX: an id from here on is unknown to the driver */
    uint32_t durations;       /* SW thermal, HW thermal, HW power brake durations (ns) from here; 0: none */
    uint32_t smoothing, smoothing_last; /* NVML_FI_PWR_SMOOTHING_* ids; 0: none */
    int link_in_scope;        /* per-link NVLink error ids read the link from scopeId (CUDA 12.9, R575) */
};
static const struct numbering numberings[] = { /* newest last */
    {0, 185, 0, 0, 0, 0},              /* R525/R530 and before: POWER_AVERAGE/INSTANT (185/186) unknown */
    {535000, 230, 0, 0, 0, 0},         /* R535-R565: power fields; recovery only as 226/227 */
    {570000, 251, 0, 0, 0, 0},         /* R570: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230) */
    {575000, 274, 251, 256, 273, 1},   /* R575, R580 to 580.65 (CUDA 13.0): durations 251-253, smoothing 256-273 */
    {580082, 274, 269, 251, 268, 1},   /* 580.82 (13.0 Update 1, "TRD2") on: smoothing 251-268, durations 269-271 */
};

static const struct numbering *numbering(void) {
    const char *minor = strchr(st->driver_version, '.');
    int version = atoi(st->driver_version) * 1000 + (minor ? atoi(minor + 1) : 0), last = 0;
    for (int k = 0; k < (int)(sizeof numberings / sizeof *numberings); k++)
        if (version >= numberings[k].since) last = k;
    return &numberings[last];
}

/* A field batch's CPU: the H200 charged per firmware query, not per value: fields answered by one
 * query cost it once per batch (74-76 together 0.58 ms; 197-198 0.27 ms; 185-186 7 µs). */
enum { Q_ENERGY, Q_PERF_POLICY, Q_HW_THERMAL, Q_POWER_BRAKE, Q_ECC, Q_PCIE_REPLAY, Q_169, Q_PCIE_BYTES,
       Q_POWER, Q_COUNT };
_Static_assert(Q_COUNT <= 16, "query_price_us holds 16 queries");

static int field_query(const struct numbering *n, uint32_t id) {
    if (id == 83 || id == 191) return Q_ENERGY;
    if (id >= 74 && id <= 76) return Q_PERF_POLICY;
    if (n->durations && id == n->durations + 1) return Q_HW_THERMAL;
    if (n->durations && id == n->durations + 2) return Q_POWER_BRAKE;
    if (id >= 1 && id <= 6) return Q_ECC; /* ECC mode (1-2 measured, 0.13 ms); counts 3-6 assumed alike */
    if (id == 94) return Q_PCIE_REPLAY;
    if (id == 169) return Q_169;
    if (id == 197 || id == 198) return Q_PCIE_BYTES;
    if (id == 185 || id == 186) return Q_POWER;
    return -1;
}

/* The latencyUsec the H200's driver reported for a field (83 5.6 ms, 191 3.2 ms, 270 5.4 ms, 94 2.2 ms,
 * 3 1.7 ms, 271 1.2 ms, 169 0.9 ms, 75 0.6 ms, 1 0.4 ms, most others 0); ids it did not answer
 * (NVLink links) are modelled: a link counter asks the link's firmware. */
static int64_t field_latency(const struct gpu *g, const struct numbering *n, uint32_t id) {
    int64_t us = 0;
    if (id < MAX_FIELD && g->latency_of_us[id] >= 0) us = g->latency_of_us[id]; /* nv-replay: captured */
    else if (id == 83) us = 5600;
    else if (id == 191) us = 3200;
    else if (n->durations && id == n->durations + 1) us = 5400;
    else if (n->durations && id == n->durations + 2) us = 1200;
    else if (id == 94) us = 2200;
    else if (id == 3) us = 1700;
    else if (id == 169) us = 900;
    else if (id == 75) us = 600;
    else if (id == 1) us = 400;
    else if ((id >= 32 && id <= 59) || (id >= 96 && id <= 119) || id == 138 || id == 139) us = 25;
    return us + g->field_latency_us;
}

/* --- end nv-fields --- */

/* --- nv-health: the health, traffic and memory-temperature fields (ids and units from nvml.h) --- */
static int nvlink_error(const struct gpu *g, const struct field_value *request, int link_in_scope,
                        struct field_value *v) {
    /* Per-link ids, L0-L5 then L6-L11 in a later block: CRC flit 32/96, CRC data 39/102, replay 46/108,
     * recovery 53/114 (the seventh id of the first block, L0+6, is the total over links: not kept).
     * From R575 the driver takes the link from scopeId (any of a kind's ids then names the kind). */
    static const uint32_t first[4] = {32, 39, 46, 53}, later[4] = {96, 102, 108, 114};
    uint32_t id = request->field_id;
    for (int kind = 0; kind < 4; kind++) {
        uint32_t link = MAX_LINKS;
        if (id >= first[kind] && id < first[kind] + 6) link = id - first[kind];
        else if (id >= later[kind] && id < later[kind] + 6) link = 6 + id - later[kind];
        if (link == MAX_LINKS) continue;
        if (link_in_scope) {
            if (!g->nvlink_count) return ERROR_NOT_SUPPORTED;
            if (request->scope_id >= g->nvlink_count) return ERROR_INVALID_ARGUMENT; /* no such link */
            link = request->scope_id;
        }
        if (link >= g->nvlink_count) return ERROR_NOT_SUPPORTED;
        v->value_type = VALUE_ULL;
        v->value = g->nvlink_errors[link][kind];
        return SUCCESS;
    }
    return ERROR_NOT_SUPPORTED;
}

static int health_field(const struct gpu *g, const struct numbering *n, struct field_value *v) {
    uint32_t id = v->field_id, scope = v->scope_id;
    int remaps = !g->retires_pages;
    v->value_type = VALUE_ULL;
    switch (id) {
    case 3: case 4: v->value = g->ecc_volatile[id - 3]; return SUCCESS;
    case 5: case 6: v->value = g->ecc_aggregate[id - 5]; return SUCCESS;
    case 197: case 198: v->value = g->pcie_bytes[id - 197]; return SUCCESS;
    case 138: case 139:
        if (scope >= g->nvlink_count) return ERROR_INVALID_ARGUMENT; /* no such link */
        v->value = g->nvlink_kib[scope][id - 138];
        return SUCCESS;
    }
    v->value_type = VALUE_UINT;
    switch (id) {
    case 29: case 30: case 31:
        if (!g->retires_pages) return ERROR_NOT_SUPPORTED;
        v->value = g->retired[id - 29];
        return SUCCESS;
    case 142: case 143: case 144: case 145:
        if (!remaps) return ERROR_NOT_SUPPORTED;
        v->value = g->remapped[id - 142];
        return SUCCESS;
    case 91: /* a GPU without NVLink (an H200 PCIe) answers NOT_SUPPORTED, not 0 */
        if (!g->nvlink_count) return ERROR_NOT_SUPPORTED;
        v->value = g->nvlink_count;
        return SUCCESS;
    case 94: v->value = g->pcie_replays; return SUCCESS;
    case FI_GPU_RECOVERY_ACTION: v->value = g->recovery_action; return SUCCESS;
    /* What the deprecated status fields can say of an action: a reset, or a drain then a reset. */
    case FI_RESET_STATUS: v->value = g->recovery_action == 1; return SUCCESS;
    case FI_DRAIN_AND_RESET_STATUS: v->value = g->recovery_action == 4; return SUCCESS;
    }
    return nvlink_error(g, v, n->link_in_scope, v);
}
/* --- end nv-health --- */

/* --- nv-replay: a field as a capture recorded it (id and scope), its counter run on at its rate since
 * the replay began; -1 where the capture holds no answer of it (the model answers). --- */
static int replayed_field(const struct gpu *g, struct field_value *v) {
    uint32_t id = v->field_id;
    if (id >= MAX_FIELD || !g->replay_field_first[id]) return -1;
    for (uint32_t k = g->replay_field_first[id] - 1u; k < g->replay_field_count && k < MAX_REPLAY_FIELDS; k++) {
        const struct replay_field *r = &g->replay_fields[k];
        if (r->id != id) break;
        if (r->scope != v->scope_id) continue;
        v->value_type = r->type;
        v->value = r->value;
        if (r->rate > 0 && r->ret == SUCCESS) {
            uint64_t now = now_ns(CLOCK_MONOTONIC);
            double seconds = now > g->replay_since_ns ? (double)(now - g->replay_since_ns) / 1e9 : 0.0;
            if (r->type == 0) { /* NVML_VALUE_TYPE_DOUBLE */
                double d;
                memcpy(&d, &r->value, sizeof d);
                d += r->rate * seconds;
                memcpy(&v->value, &d, sizeof d);
            } else v->value = r->value + (uint64_t)(r->rate * seconds);
        }
        return r->ret;
    }
    return -1;
}
/* --- end nv-replay --- */

static int field(struct gpu *g, struct field_value *v) {
    const struct numbering *n = numbering();
    uint32_t id = v->field_id;
    if (id >= FIELD_IDS || id >= n->fi_max) return ERROR_INVALID_ARGUMENT; /* past this NVML_FI_MAX */
    if (g->field_unsupported[id]) return ERROR_NOT_SUPPORTED;
    if (g->field_answer_type[id] && !v->scope_id) { /* nv-answers */
        v->value_type = g->field_answer_type[id] - 1u;
        v->value = g->field_answer[id];
        return SUCCESS;
    }
    v->value_type = VALUE_UINT;
    if (n->smoothing && id >= n->smoothing && id <= n->smoothing_last) {
        /* A GPU without power smoothing (an H200) answers NOT_SUPPORTED, with value type 1. */
        if (!g->power_smoothing) return ERROR_NOT_SUPPORTED;
        /* NVML_FI_PWR_SMOOTHING_ENABLED, _PRIV_LVL, _IMM_RAMP_DOWN_ENABLED, then levels (percent) */
        static const uint32_t settings[3] = {1, 0, 1};
        v->value = id - n->smoothing < 3 ? settings[id - n->smoothing] : 40;
        return SUCCESS;
    }
    if ((id == FI_POWER_INSTANT || id == FI_POWER_AVERAGE) && v->scope_id) { /* a power scope */
        uint32_t scoped = v->scope_id == 1 ? g->module_power_mw : v->scope_id == 2 ? g->memory_power_mw : 0;
        if (!scoped) return ERROR_NOT_SUPPORTED;
        v->value = scoped;
        return SUCCESS;
    }
    switch (id) {
    case FI_POWER_INSTANT: v->value = refreshed_instant_mw(g); return SUCCESS;
    case FI_POWER_AVERAGE:
        v->value = g->average_mw ? g->average_mw : average_mw(g, g->refresh_ns[R_AVERAGE]);
        return SUCCESS;
    case FI_MEMORY_TEMP: v->value = g->memory_temperature; return SUCCESS;
    }
    v->value_type = VALUE_ULL;
    if (n->durations && id >= n->durations && id < n->durations + 3) {
        v->value = g->clock_event_ns[id - n->durations];
        return v->value == NOT_COUNTED ? ERROR_NOT_SUPPORTED : SUCCESS;
    }
    switch (id) {
    case FI_TOTAL_ENERGY_CONSUMPTION: /* the same counter: a GPU without it (pre-Volta) lacks both */
        if (g->fn_error[FN_nvmlDeviceGetTotalEnergyConsumption])
            return g->fn_error[FN_nvmlDeviceGetTotalEnergyConsumption];
        v->value = answer_energy(g);
        return SUCCESS;
    case FI_PERF_POLICY_POWER: v->value = g->violation_ns[0]; break;
    case FI_PERF_POLICY_THERMAL: v->value = g->clock_event_ns[0]; break; /* the SW thermal counter */
    case FI_PERF_POLICY_SYNC_BOOST: v->value = g->violation_ns[2]; break;
    default: return health_field(g, n, v);
    }
    return v->value == NOT_COUNTED ? ERROR_NOT_SUPPORTED : SUCCESS;
}

int nvmlDeviceGetFieldValues(void *h, int n, struct field_value *values) {
    DEVICE_CALL(nvmlDeviceGetFieldValues, h);
    if (n < 0 || !values) return ERROR_INVALID_ARGUMENT;
    const struct numbering *numbered = numbering();
    int64_t now_us = (int64_t)(now_ns(CLOCK_REALTIME) / 1000), latency_us = 0;
    uint64_t price_us = 0;
    g->batch_ns[__atomic_fetch_add(&g->batch_head, 1, __ATOMIC_RELAXED) % BATCH_TIMES] = now_ns(CLOCK_MONOTONIC);
    unsigned queried = 0; /* the firmware queries this batch made, each charged once */
    for (int i = 0; i < n; i++) { /* the call succeeds; each value carries its own return code */
        values[i].value = 0;
        values[i].timestamp = now_us;
        if (values[i].field_id < MAX_FIELD) g->field_asked[values[i].field_id] = 1; /* nv-replay */
        int replayed = replayed_field(g, &values[i]); /* nv-replay: a capture's answer, else the model's */
        values[i].nvml_return = replayed >= 0 ? replayed : field(g, &values[i]);
        values[i].latency_usec = field_latency(g, numbered, values[i].field_id);
        latency_us += values[i].latency_usec;
        int query = field_query(numbered, values[i].field_id);
        if (query < 0) price_us += values[i].field_id < MAX_FIELD ? g->field_price_us[values[i].field_id] : 0;
        else if (!(queried & 1u << query)) queried |= 1u << query, price_us += g->query_price_us[query];
    }
    burn_us(price_us);
    int64_t waited_us = latency_us - (charges() ? (int64_t)price_us : 0); /* the rest of its time */
    struct timespec wait = {waited_us / 1000000, (long)(waited_us % 1000000) * 1000L};
    if (waited_us > 0 && spends_latency()) nanosleep(&wait, NULL);
    return SUCCESS;
}

/* --- nv-fields: every link's error counters by call (what DCGM asks for links 12-17) --- */
int nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned int link, int counter, unsigned long long *value) {
    DEVICE_CALL(nvmlDeviceGetNvLinkErrorCounter, h);
    /* NVML_NVLINK_ERROR_DL_REPLAY, _RECOVERY, _CRC_FLIT, _CRC_DATA -> nvlink_errors' kinds */
    static const int kinds[4] = {2, 3, 0, 1};
    if (!g->nvlink_count) return ERROR_NOT_SUPPORTED;
    if (link >= g->nvlink_count || counter < 0 || counter > 3 || !value) return ERROR_INVALID_ARGUMENT;
    if (g->nvlink_error_code[link]) return g->nvlink_error_code[link];
    *value = g->nvlink_errors[link][kinds[counter]];
    return SUCCESS;
}

/* Graphics processes: none on a compute node (what nvitop-exporter asks beside the compute ones). */
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned int *n, void *infos) {
    DEVICE_CALL(nvmlDeviceGetGraphicsRunningProcesses_v3, h);
    (void)g, (void)infos;
    if (!n) return ERROR_INVALID_ARGUMENT;
    *n = 0;
    return SUCCESS;
}

/* PCIe throughput (KB/s over 20 ms): what nvitop-exporter asks; warptd counts PCIe bytes from fields
 * 197/198 or GPM. Answered NOT_SUPPORTED: enough for a peer exporter run side by side in a bench. */
int nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned int *value) {
    DEVICE_CALL(nvmlDeviceGetPcieThroughput, h);
    (void)counter, (void)value, (void)g;
    return ERROR_NOT_SUPPORTED;
}

/* NVLink state: NOT_SUPPORTED on a GPU without NVLink (an H200 PCIe answered so for all 18 links). */
int nvmlDeviceGetNvLinkState(void *h, unsigned int link, unsigned int *active) {
    DEVICE_CALL(nvmlDeviceGetNvLinkState, h);
    if (!g->nvlink_count) return ERROR_NOT_SUPPORTED;
    if (link >= MAX_LINKS || !active) return ERROR_INVALID_ARGUMENT;
    *active = link < g->nvlink_count && g->nvlink_error_code[link] != ERROR_NOT_SUPPORTED;
    return SUCCESS;
}

/* nvmlGpuInstanceProfileInfo_v2_t. nvml.h: NOT_SUPPORTED where MIG mode is off (or the GPU has none);
 * the 7-slice profile (NVML_GPU_INSTANCE_PROFILE_7_SLICE = 4) is the whole GPU of a Hopper. */
struct instance_profile {
    uint32_t version, id, p2p, slices, instances, multiprocessors, copy_engines;
    uint32_t decoders, encoders, jpegs, ofas;
    uint64_t memory_mb;
    char name[96];
};
#define PROFILE_INFO_V2 (0x02000000u | (uint32_t)sizeof(struct instance_profile))

int nvmlDeviceGetGpuInstanceProfileInfoV(void *h, unsigned int profile, struct instance_profile *info) {
    DEVICE_CALL(nvmlDeviceGetGpuInstanceProfileInfoV, h);
    if (!info) return ERROR_INVALID_ARGUMENT;
    if (info->version != PROFILE_INFO_V2) return ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!g->mig_mode) return ERROR_NOT_SUPPORTED;
    static const uint32_t slices[] = {1, 2, 3, 4, 7, 8, 6}; /* 1_SLICE ... 7_SLICE, 8_SLICE, 6_SLICE */
    if (profile >= sizeof slices / sizeof *slices || slices[profile] > 7) return ERROR_NOT_SUPPORTED;
    uint32_t part = slices[profile];
    memset(info, 0, sizeof *info);
    info->version = PROFILE_INFO_V2, info->id = profile, info->slices = part, info->instances = 7 / part;
    info->decoders = g->media_engines[0] * part / 7, info->jpegs = g->media_engines[1] * part / 7;
    info->ofas = g->media_engines[2] * part / 7, info->encoders = g->media_engines[3] * part / 7;
    info->memory_mb = g->memory_total / 1048576 * part / 8;
    snprintf(info->name, sizeof info->name, "%ug", part);
    return SUCCESS;
}
/* --- end nv-fields --- */

/* -- events ------------------------------------------------------------------------------------- */
int nvmlDeviceGetSupportedEventTypes(void *h, unsigned long long *types) {
    DEVICE_CALL(nvmlDeviceGetSupportedEventTypes, h);
    *types = g->supported_events;
    return SUCCESS;
}

int nvmlEventSetCreate(struct event_set **out) {
    int ret = ready(FN_nvmlEventSetCreate);
    if (ret) return ret;
    static int next; /* round robin, so a new set is never at a just-freed set's address */
    for (int k = 0; k < MAX_SETS; k++) {
        struct event_set *set = &sets[(next + k) % MAX_SETS];
        if (!set->used) {
            memset(set, 0, sizeof *set);
            set->used = 1;
            set->owner = st;
            next = (next + k + 1) % MAX_SETS;
            *out = set;
            return SUCCESS;
        }
    }
    return ERROR_UNKNOWN;
}

static int valid_set(struct event_set *set) {
    if (set < sets || set >= sets + MAX_SETS) return ERROR_INVALID_ARGUMENT;
    if (!set->used) {
        if (set->torn_down) __atomic_fetch_add(&st->use_after_free, 1, __ATOMIC_RELAXED);
        return set->torn_down ? ERROR_UNINITIALIZED : ERROR_INVALID_ARGUMENT;
    }
    return SUCCESS;
}

int nvmlDeviceRegisterEvents(void *h, unsigned long long types, struct event_set *set) {
    DEVICE_CALL(nvmlDeviceRegisterEvents, h);
    if ((ret = valid_set(set))) return ret;
    if (types & ~g->supported_events) return ERROR_NOT_SUPPORTED;
    set->mask[((struct device_tag *)h)->slot] |= types;
    return SUCCESS;
}

struct event_data { void *device; uint64_t type, data; uint32_t gpu_instance, compute_instance; };

static int next_event(struct event_set *set, struct event_data *out) {
    for (uint32_t i = 0; i < st->gpu_count; i++) {
        int slot = st->order[i];
        struct gpu *g = &st->gpus[slot];
        uint64_t mask = set->mask[slot];
        while (mask && g->event_head != g->event_tail) {
            struct event e = g->events[g->event_head % MAX_EVENTS];
            g->event_head++;
            if (e.type & mask) {
                gpu_tags[slot].slot = slot, gpu_tags[slot].mig = -1;
                out->device = &gpu_tags[slot];
                out->type = e.type, out->data = e.data;
                out->gpu_instance = out->compute_instance = 0xFFFFFFFFu;
                return 1;
            }
        }
    }
    return 0;
}

int nvmlEventSetWait_v2(struct event_set *set, struct event_data *data, unsigned int timeout_ms) {
    int ret = ready(FN_nvmlEventSetWait_v2);
    if (ret) return ret;
    if ((ret = valid_set(set))) return ret;
    for (unsigned waited = 0;; waited += 10) { /* the driver blocks in the kernel; we poll */
        if (!set->used) { /* torn down under a wait in progress */
            __atomic_fetch_add(&st->use_after_free, 1, __ATOMIC_RELAXED);
            return ERROR_UNINITIALIZED;
        }
        if (next_event(set, data)) return SUCCESS;
        for (uint32_t i = 0; i < st->gpu_count; i++)
            if (set->mask[st->order[i]] && st->gpus[st->order[i]].lost) return ERROR_GPU_IS_LOST;
        if (waited >= timeout_ms) return ERROR_TIMEOUT;
        sleep_ms(10);
    }
}

int nvmlEventSetFree(struct event_set *set) {
    int ret = ready(FN_nvmlEventSetFree);
    if (ret) return ret;
    if ((ret = valid_set(set))) return ret;
    set->used = 0;
    return SUCCESS;
}

/* -- processes ---------------------------------------------------------------------------------- */
struct process_info { uint32_t pid; uint32_t pad; uint64_t used; uint32_t gpu_instance, compute_instance; };

static int processes(struct gpu *g, unsigned int *n, struct process_info *infos) {
    if (!n) return ERROR_INVALID_ARGUMENT;
    if (*n < g->process_count || (!infos && g->process_count)) {
        *n = g->process_count;
        return ERROR_INSUFFICIENT_SIZE;
    }
    for (uint32_t i = 0; i < g->process_count; i++) {
        infos[i].pid = g->processes[i].pid;
        infos[i].used = g->processes[i].used;
        infos[i].gpu_instance = infos[i].compute_instance = 0xFFFFFFFFu;
    }
    *n = g->process_count;
    return SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *h, unsigned int *n, struct process_info *infos) {
    DEVICE_CALL(nvmlDeviceGetComputeRunningProcesses_v2, h);
    return processes(g, n, infos);
}

#ifndef OLD_DRIVER
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *n, struct process_info *infos) {
    DEVICE_CALL(nvmlDeviceGetComputeRunningProcesses_v3, h);
    return processes(g, n, infos);
}
#endif

/* --- nv-processes: per-process utilization ----------------------------------------------------
 * Both functions answer the samples newer than lastSeenTimeStamp (µs), with the two-call size
 * protocol: no buffer (or too small a count) -> INSUFFICIENT_SIZE and the count; no newer sample ->
 * NOT_FOUND, as the driver says when no process used the GPU since. */
struct process_util_sample { uint32_t pid; uint64_t t_us; uint32_t sm, mem, enc, dec; };
struct process_util_info { uint64_t t_us; uint32_t pid, sm, mem, enc, dec, jpg, ofa; };
struct processes_util_info { uint32_t version, count; uint64_t last_seen; struct process_util_info *samples; };
#define PROCESSES_UTILIZATION_INFO_V1 (0x01000000u | (uint32_t)sizeof(struct processes_util_info))

/* The driver's samples newer than last_seen, oldest first. Scripted ones (util_samples), or live
 * ones where util_window_us is set: the driver closes a sampling window every util_window_us (CPU
 * timestamps in µs, CLOCK_REALTIME, as the driver's), takes one sample per process that used the
 * SMs in it, and keeps its last DRIVER_WINDOWS windows (NV2080_CTRL_PERF_GPUMON_SAMPLE_COUNT_PERFMON_UTIL
 * in the open kernel modules): a reader asking less often than that loses the older ones. */
#define DRIVER_WINDOWS 100
struct newer {
    const struct gpu *g;
    uint64_t last_seen, first_window; /* live: the end of the first window newer than last_seen */
    uint32_t active[MAX_PROCS], n_active, count;
};

static uint32_t open_newer(struct newer *c, const struct gpu *g, uint64_t last_seen) {
    c->g = g, c->last_seen = last_seen, c->first_window = 0, c->count = 0, c->n_active = 0;
    uint64_t w = g->util_window_us;
    if (!w) {
        for (uint32_t i = 0; i < g->util_sample_count && i < MAX_UTIL_SAMPLES; i++) c->count += g->util_samples[i].t_us > last_seen;
        return c->count;
    }
    for (uint32_t i = 0; i < g->process_count && i < MAX_PROCS; i++)
        if (g->processes[i].sm) c->active[c->n_active++] = i;
    uint64_t now = now_ns(CLOCK_REALTIME) / 1000, newest = now - now % w;
    uint64_t oldest = newest > (uint64_t)(DRIVER_WINDOWS - 1) * w ? newest - (uint64_t)(DRIVER_WINDOWS - 1) * w : w;
    uint64_t first = last_seen - last_seen % w + w;
    c->first_window = first < oldest ? oldest : first;
    if (c->first_window <= newest) c->count = (uint32_t)((newest - c->first_window) / w + 1) * c->n_active;
    return c->count;
}

static struct util_sample newer_at(const struct newer *c, uint32_t k) {
    const struct gpu *g = c->g;
    if (g->util_window_us) {
        const struct process *p = &g->processes[c->active[k % c->n_active]];
        uint64_t t = c->first_window + (uint64_t)(k / c->n_active) * g->util_window_us;
        return (struct util_sample){t, p->pid, p->sm, p->sm / 4, 0, 0, 0};
    }
    for (uint32_t i = 0; i < g->util_sample_count && i < MAX_UTIL_SAMPLES; i++)
        if (g->util_samples[i].t_us > c->last_seen && k-- == 0) return g->util_samples[i];
    return (struct util_sample){0};
}

int nvmlDeviceGetProcessUtilization(void *h, struct process_util_sample *out, unsigned int *n, unsigned long long last_seen) {
    DEVICE_CALL(nvmlDeviceGetProcessUtilization, h);
    if (!n) return ERROR_INVALID_ARGUMENT;
    struct newer c;
    uint32_t newer = open_newer(&c, g, last_seen);
    if (!newer) return ERROR_NOT_FOUND;
    if (!out || *n < newer) {
        *n = newer;
        return ERROR_INSUFFICIENT_SIZE;
    }
    for (uint32_t k = 0; k < newer; k++) {
        struct util_sample s = newer_at(&c, k);
        out[k] = (struct process_util_sample){s.pid, s.t_us, s.sm, s.mem, s.enc, s.dec};
    }
    *n = newer;
    return SUCCESS;
}

#ifndef OLD_DRIVER /* arrived in R550 */
int nvmlDeviceGetProcessesUtilizationInfo(void *h, struct processes_util_info *info) {
    DEVICE_CALL(nvmlDeviceGetProcessesUtilizationInfo, h);
    if (!info) return ERROR_INVALID_ARGUMENT;
    if (info->version != PROCESSES_UTILIZATION_INFO_V1) return ERROR_ARGUMENT_VERSION_MISMATCH;
    struct newer c;
    uint32_t newer = open_newer(&c, g, info->last_seen);
    if (!newer) return ERROR_NOT_FOUND;
    if (!info->samples || info->count < newer) {
        info->count = newer;
        return ERROR_INSUFFICIENT_SIZE;
    }
    uint64_t latest = info->last_seen;
    for (uint32_t k = 0; k < newer; k++) {
        struct util_sample s = newer_at(&c, k);
        info->samples[k] = (struct process_util_info){s.t_us, s.pid, s.sm, s.mem, s.enc, s.dec, 0, 0};
        if (s.t_us > latest) latest = s.t_us;
    }
    info->count = newer;
    info->last_seen = latest;
    return SUCCESS;
}
#endif

/* -- MIG ---------------------------------------------------------------------------------------- */
int nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL(nvmlDeviceGetMigMode, h);
    *current = *pending = g->mig_mode;
    return SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned int *n) {
    DEVICE_CALL(nvmlDeviceGetMaxMigDeviceCount, h);
    *n = g->mig_mode ? MAX_MIG : 0;
    return SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned int index, void **mig) {
    DEVICE_CALL(nvmlDeviceGetMigDeviceHandleByIndex, h);
    if (!g->mig_mode) return ERROR_INVALID_ARGUMENT;
    if (index >= MAX_MIG) return ERROR_INVALID_ARGUMENT;
    if (index >= g->mig_count) return ERROR_NOT_FOUND; /* no MIG device at this index */
    int slot = ((struct device_tag *)h)->slot;
    mig_tags[slot][index].slot = slot, mig_tags[slot][index].mig = (int)index;
    *mig = &mig_tags[slot][index];
    return SUCCESS;
}

int nvmlDeviceIsMigDeviceHandle(void *h, unsigned int *is_mig) {
    DEVICE_CALL(nvmlDeviceIsMigDeviceHandle, h);
    *is_mig = ((struct device_tag *)h)->mig >= 0;
    return SUCCESS;
}

int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **parent) {
    DEVICE_CALL(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, h);
    int slot = ((struct device_tag *)h)->slot;
    *parent = &gpu_tags[slot];
    return SUCCESS;
}

/* --- nv-gpm: GPM (Hopper and newer) and MIG instance ids --- */
int nvmlDeviceGetGpuInstanceId(void *h, unsigned int *id) {
    DEVICE_CALL(nvmlDeviceGetGpuInstanceId, h);
    int mig = ((struct device_tag *)h)->mig;
    if (mig < 0) return ERROR_INVALID_ARGUMENT; /* not a MIG device handle */
    *id = g->mig_gi[mig];
    return SUCCESS;
}

int nvmlDeviceGetComputeInstanceId(void *h, unsigned int *id) {
    DEVICE_CALL(nvmlDeviceGetComputeInstanceId, h);
    int mig = ((struct device_tag *)h)->mig;
    if (mig < 0) return ERROR_INVALID_ARGUMENT;
    *id = g->mig_ci[mig];
    return SUCCESS;
}

#ifndef OLD_DRIVER /* GPM arrived in R525 */
#define GPM_SAMPLES 1024
#define GPM_SUPPORT_VERSION 1u
#define GPM_METRICS_GET_VERSION 1u
/* nvmlGpmSample_t points at one of these: the counters as the driver saw them, when the call was made
 * (CLOCK_MONOTONIC) and which refresh of the GPU's counters they come from. */
struct gpm_sample { int used, filled, slot, gpu_instance; uint64_t t_ns, refresh; struct gpm_counters c; };
static struct gpm_sample gpm_samples[GPM_SAMPLES];
/* nvmlGpmSupport_t, nvmlGpmMetric_t (with its metricInfo) and nvmlGpmMetricsGet_t of nvml.h. */
struct gpm_support { uint32_t version, is_supported_device; };
struct gpm_metric_info { const char *short_name, *long_name, *unit; };
struct gpm_metric { uint32_t metric_id; int32_t nvml_return; double value; struct gpm_metric_info info; };
struct gpm_metrics_get {
    uint32_t version, num_metrics;
    struct gpm_sample *sample1, *sample2;
    struct gpm_metric metrics[]; /* NVML_GPM_METRIC_MAX in the header; the driver reads num_metrics */
};

/* Live samples of this process (allocated, not freed): what a leak leaves behind. */
int double_gpm_live(void) {
    int live = 0;
    for (int i = 0; i < GPM_SAMPLES; i++) live += gpm_samples[i].used;
    return live;
}

int nvmlGpmQueryDeviceSupport(void *h, struct gpm_support *support) {
    DEVICE_CALL(nvmlGpmQueryDeviceSupport, h);
    if (!support) return ERROR_INVALID_ARGUMENT;
    if (support->version != GPM_SUPPORT_VERSION) return ERROR_ARGUMENT_VERSION_MISMATCH;
    support->is_supported_device = g->gpm_supported;
    return SUCCESS;
}

int nvmlGpmSampleAlloc(struct gpm_sample **out) {
    int ret = ready(FN_nvmlGpmSampleAlloc);
    if (ret) return ret;
    if (!out) return ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < GPM_SAMPLES; i++)
        if (!gpm_samples[i].used) {
            memset(&gpm_samples[i], 0, sizeof gpm_samples[i]);
            gpm_samples[i].used = 1;
            *out = &gpm_samples[i];
            return SUCCESS;
        }
    return ERROR_UNKNOWN; /* out of memory */
}

static int valid_sample(const struct gpm_sample *s) {
    return s >= gpm_samples && s < gpm_samples + GPM_SAMPLES && s->used;
}

int nvmlGpmSampleFree(struct gpm_sample *sample) {
    int ret = ready(FN_nvmlGpmSampleFree);
    if (ret) return ret;
    if (!valid_sample(sample)) return ERROR_INVALID_ARGUMENT; /* a double free */
    sample->used = 0;
    return SUCCESS;
}

/* The driver refreshes a GPU's GPM counters at "the internal sample refresh rate" (nvml.h: two
 * nvmlGpmSampleGet calls should be over 100 ms apart): a sample sees the counters as of the last
 * refresh, made again here when it is 100 ms old, with the scripted traffic run on to that time. */
static void refresh(struct gpu *g, uint64_t t) {
    if (g->gpm_refresh && t - g->gpm_refreshed_ns < g->refresh_ns[R_GPM]) return;
    uint64_t until = g->gpm_rate_until_ns && g->gpm_rate_until_ns < t ? g->gpm_rate_until_ns : t;
    double seconds = g->gpm_rate_since_ns && until > g->gpm_rate_since_ns
                         ? (double)(until - g->gpm_rate_since_ns) / 1e9 : 0.0;
    g->gpm_seen = g->gpm;
    for (int d = 0; d < 2; d++) g->gpm_seen.pcie[d] += (uint64_t)(g->gpm_pcie_rate[d] * seconds);
    for (int link = 0; link < GPM_LINKS; link++)
        for (int d = 0; d < 2; d++) g->gpm_seen.nvlink[link][d] += (uint64_t)(g->gpm_nvlink_rate[link][d] * seconds);
    memcpy(g->mig_gpm_seen, g->mig_gpm, sizeof g->mig_gpm);
    g->gpm_refreshed_ns = t, g->gpm_refresh++;
}

/* A sample of the whole GPU (mig < 0) or of its mig-th MIG device's GPU instance, timed at the call. */
static void take(struct gpm_sample *s, struct gpu *g, int slot, int mig) {
    uint64_t t = now_ns(CLOCK_MONOTONIC);
    refresh(g, t);
    s->filled = 1, s->slot = slot, s->gpu_instance = mig < 0 ? -1 : (int)g->mig_gi[mig];
    s->t_ns = t, s->refresh = g->gpm_refresh;
    s->c = mig < 0 ? g->gpm_seen : g->mig_gpm_seen[mig];
}

int nvmlGpmSampleGet(void *h, struct gpm_sample *sample) {
    DEVICE_CALL(nvmlGpmSampleGet, h);
    if (!valid_sample(sample)) return ERROR_INVALID_ARGUMENT;
    if (!g->gpm_supported) return ERROR_NOT_SUPPORTED;
    take(sample, g, ((struct device_tag *)h)->slot, -1);
    return SUCCESS;
}

int nvmlGpmMigSampleGet(void *h, unsigned int gpu_instance, struct gpm_sample *sample) {
    DEVICE_CALL(nvmlGpmMigSampleGet, h);
    if (!valid_sample(sample) || ((struct device_tag *)h)->mig >= 0) return ERROR_INVALID_ARGUMENT;
    if (!g->gpm_supported) return ERROR_NOT_SUPPORTED;
    for (uint32_t k = 0; g->mig_mode && k < g->mig_count; k++)
        if (g->mig_gi[k] == gpu_instance) {
            take(sample, g, ((struct device_tag *)h)->slot, (int)k);
            return SUCCESS;
        }
    return ERROR_NOT_FOUND;
}

/* The activity slot of a metric id (SM, pipes, media engines), or -1. */
static int gpm_slot(uint32_t id) {
    static const uint32_t first[][3] = { /* first id, count, first slot */
        {2, 2, 0}, {4, 2, 2}, {10, 4, 4}, {30, 8, 8}, {40, 8, 16}, {50, 2, 24}, {166, 4, 26}, {1, 1, 30},
    }; /* SM_UTIL, SM_OCCUPANCY; INTEGER, ANY_TENSOR; DRAM_BW, FP64, FP32, FP16; NVDEC; NVJPG; NVOFA; NVENC;
        * GRAPHICS_UTIL */
    for (unsigned k = 0; k < sizeof first / sizeof first[0]; k++)
        if (id >= first[k][0] && id < first[k][0] + first[k][1]) return (int)(first[k][2] + id - first[k][0]);
    return -1;
}

/* One metric over two samples. Two samples of one refresh (under 100 ms apart) hold no counts: each
 * utilization is 0 cycles of 0 (NaN), each throughput 0 bytes over the time between the calls; two of
 * refreshes under 100 ms apart put up to 100 ms of counts over less time. Both answer SUCCESS. */
static int gpm_metric(const struct gpu *g, const struct gpm_sample *a, const struct gpm_sample *b,
                      struct gpm_metric *m) {
    uint32_t id = m->metric_id;
    double seconds = (double)(b->t_ns - a->t_ns) / 1e9, mib = 1048576.0;
    int slot = gpm_slot(id), answered = -1;
    for (uint32_t k = 0; k < g->gpm_answer_count && k < GPM_ANSWERS; k++)
        if (g->gpm_answers[k].metric_id == id) answered = (int)k;
    if (slot >= 0) {
        uint64_t elapsed = b->c.elapsed - a->c.elapsed;
        m->value = elapsed ? 100.0 * (double)(b->c.active[slot] - a->c.active[slot]) / (double)elapsed
                 : a->refresh == b->refresh ? NAN : 0.0;
        m->info = (struct gpm_metric_info){"util", "utilization", "%"};
        if (answered >= 0) m->value = g->gpm_answers[answered].value;
        return SUCCESS;
    }
    m->info = (struct gpm_metric_info){"bw", "bandwidth", "MiB/sec"};
    if (answered >= 0) {
        m->value = g->gpm_answers[answered].value;
        return SUCCESS;
    }
    if (seconds <= 0) return ERROR_INVALID_ARGUMENT;
    if (id == 20 || id == 21) { /* PCIE_TX_PER_SEC, PCIE_RX_PER_SEC */
        m->value = (double)(b->c.pcie[id - 20] - a->c.pcie[id - 20]) / mib / seconds;
        return SUCCESS;
    }
    if (id >= 62 && id < 62 + 2 * GPM_LINKS) { /* NVLINK_L<n>_RX_PER_SEC, _TX_PER_SEC */
        unsigned link = (id - 62) / 2, direction = (id - 62) % 2;
        m->value = (double)(b->c.nvlink[link][direction] - a->c.nvlink[link][direction]) / mib / seconds;
        return SUCCESS;
    }
    return ERROR_NOT_SUPPORTED;
}

int nvmlGpmMetricsGet(struct gpm_metrics_get *get) {
    int ret = ready(FN_nvmlGpmMetricsGet);
    if (ret) return ret;
    if (!get) return ERROR_INVALID_ARGUMENT;
    if (get->version != GPM_METRICS_GET_VERSION) return ERROR_ARGUMENT_VERSION_MISMATCH;
    struct gpm_sample *a = get->sample1, *b = get->sample2;
    if (!valid_sample(a) || !valid_sample(b) || !a->filled || !b->filled || get->num_metrics > GPM_METRIC_IDS)
        return ERROR_INVALID_ARGUMENT;
    if (a->slot != b->slot || a->gpu_instance != b->gpu_instance) return ERROR_INVALID_ARGUMENT;
    struct gpu *g = &st->gpus[a->slot];
    uint64_t apart = b->t_ns > a->t_ns ? b->t_ns - a->t_ns : a->t_ns - b->t_ns;
    if (apart < GPM_REFRESH_NS) __atomic_fetch_add(&g->gpm_close_pairs, 1, __ATOMIC_RELAXED);
    burn_us(g->gpm_metrics_base_us + (uint64_t)get->num_metrics * g->gpm_metric_price_us);
    int instance = 0; /* nv-replay: the GPU's answers, or its MIG device's GPU instance's */
    for (uint32_t k = 0; a->gpu_instance >= 0 && k < g->mig_count && k < MAX_MIG; k++)
        if ((int)g->mig_gi[k] == a->gpu_instance) instance = (int)k + 1;
    for (uint32_t i = 0; g->gpm_metric_max && i < get->num_metrics; i++)
        if (get->metrics[i].metric_id >= g->gpm_metric_max) return ERROR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < get->num_metrics; i++) { /* each metric carries its own return code */
        struct gpm_metric *m = &get->metrics[i];
        m->value = 0;
        m->info = (struct gpm_metric_info){NULL, NULL, NULL};
        if (m->metric_id >= GPM_METRIC_IDS) m->nvml_return = ERROR_INVALID_ARGUMENT;
        else if (g->gpm_unsupported[m->metric_id]) /* 1: NOT_SUPPORTED; else that return code */
            m->nvml_return = g->gpm_unsupported[m->metric_id] == 1 ? ERROR_NOT_SUPPORTED
                                                                   : g->gpm_unsupported[m->metric_id];
        else m->nvml_return = gpm_metric(g, a, b, m);
        int16_t replayed = m->metric_id < GPM_METRIC_IDS ? g->gpm_replay_ret[instance][m->metric_id] : 0;
        if (replayed && replayed - 1 != SUCCESS) m->nvml_return = replayed - 1; /* nv-replay: as captured */
        else if (replayed && a->refresh != b->refresh) { /* a pair within one refresh: the model's */
            m->nvml_return = SUCCESS;
            m->value = g->gpm_replay_value[instance][m->metric_id];
        }
    }
    return SUCCESS;
}
#else
int double_gpm_live(void) { return 0; } /* an R470-era driver has no GPM */
#endif
/* --- end nv-gpm --- */
/* --- nv-health: fans, media engines, performance state, the PCIe replay and row-remap calls --- */
int nvmlDeviceGetNumFans(void *h, unsigned int *n) {
    DEVICE_CALL(nvmlDeviceGetNumFans, h);
    if (!g->fan_count) return ERROR_NOT_SUPPORTED; /* a passively cooled board */
    *n = g->fan_count;
    return SUCCESS;
}

int nvmlDeviceGetFanSpeed_v2(void *h, unsigned int fan, unsigned int *percent) {
    DEVICE_CALL(nvmlDeviceGetFanSpeed_v2, h);
    if (fan >= g->fan_count) return g->fan_count ? ERROR_INVALID_ARGUMENT : ERROR_NOT_SUPPORTED;
    *percent = g->fan_percent[fan];
    return SUCCESS;
}

/* The media engines' utilization: each kind averaged over every engine of it, NOT_SUPPORTED on a
 * MIG-enabled GPU (nvml.h), 0 for a kind the GPU lacks (a real H200's encoder). */
static int media_utilization(struct gpu *g, uint32_t value, unsigned int *percent, unsigned int *period_us) {
    if (g->mig_mode) return ERROR_NOT_SUPPORTED;
    *percent = value, *period_us = 167000;
    return SUCCESS;
}

int nvmlDeviceGetEncoderUtilization(void *h, unsigned int *percent, unsigned int *period_us) {
    DEVICE_CALL(nvmlDeviceGetEncoderUtilization, h);
    return media_utilization(g, g->encoder_util, percent, period_us);
}

int nvmlDeviceGetDecoderUtilization(void *h, unsigned int *percent, unsigned int *period_us) {
    DEVICE_CALL(nvmlDeviceGetDecoderUtilization, h);
    return media_utilization(g, g->decoder_util, percent, period_us);
}

int nvmlDeviceGetJpgUtilization(void *h, unsigned int *percent, unsigned int *period_us) {
    DEVICE_CALL(nvmlDeviceGetJpgUtilization, h);
    return media_utilization(g, g->jpeg_util, percent, period_us);
}

int nvmlDeviceGetOfaUtilization(void *h, unsigned int *percent, unsigned int *period_us) {
    DEVICE_CALL(nvmlDeviceGetOfaUtilization, h);
    return media_utilization(g, g->ofa_util, percent, period_us);
}

int nvmlDeviceGetPerformanceState(void *h, int *pstate) {
    DEVICE_CALL(nvmlDeviceGetPerformanceState, h);
    *pstate = (int)g->pstate;
    return SUCCESS;
}

int nvmlDeviceGetPcieReplayCounter(void *h, unsigned int *replays) {
    DEVICE_CALL(nvmlDeviceGetPcieReplayCounter, h);
    *replays = g->pcie_replays;
    return SUCCESS;
}

int nvmlDeviceGetRemappedRows(void *h, unsigned int *cor, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure) {
    DEVICE_CALL(nvmlDeviceGetRemappedRows, h);
    if (g->retires_pages) return ERROR_NOT_SUPPORTED;
    *cor = g->remapped[0], *unc = g->remapped[1], *pending = g->remapped[2], *failure = g->remapped[3];
    return SUCCESS;
}
/* --- end nv-health --- */
