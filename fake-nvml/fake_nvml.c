/*
 * fake_nvml.c: a stand-in for libnvidia-ml.so.1, so that sweepd's GPU code, going through the
 * real nvml-wrapper crate, can be tested on machines (and CI) without an NVIDIA GPU.
 * build.rs compiles it to $OUT_DIR/fake-nvml/libnvidia-ml.so.1; tests point sweepd at it.
 *
 * Only the entry points sweepd reaches are exported (nvml-wrapper resolves every symbol at
 * init but tolerates missing ones until they are called): nvmlInit_v2, nvmlShutdown,
 * nvmlSystemGetDriverVersion (nvml-wrapper's init asks for it), nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo_v2,
 * nvmlDeviceGetUtilizationRates and nvmlDeviceGetComputeRunningProcesses_v3.
 *
 * STATE: the text file named by $FAKE_NVML_STATE, re-read on every call, so a test changes the
 * "hardware" by changing the file. A test inside the process that loaded this library (sweepd's
 * unit tests) may instead hand the text over with fake_nvml_set_state() below: no file, and no
 * environment variable to set from a running, multithreaded process. One directive per line;
 * blank lines and lines starting with '#' are ignored; SIZE is bytes, or a number with K, M, G
 * or T (KiB .. TiB), e.g. "1.5G":
 *
 *   gpu <idx> <SIZE total> [name...]  a device; the count is 1 + the highest idx declared
 *   util <idx> <gpu%> <mem%>          utilization; without it the device says NOT_SUPPORTED
 *   proc <idx> <pid> <SIZE>           a compute process on device idx; a later line for the
 *                                     same idx and pid replaces an earlier one, 0 removes it
 *   prune_dead_pids                   leave out procs whose pid is gone or a zombie, as the
 *                                     real driver frees a process's memory when it exits
 *   pid_offset <N>                    list every proc under pid + N, not its pid: NVML names
 *                                     processes by their host PIDs, which a process in a
 *                                     container's PID namespace (Docker, Kubernetes without
 *                                     --pid=host) never sees; 0 lists pids as they are
 *   pid_map <pid> <listed>            list that pid as `listed` (before pid_offset); a later
 *                                     line for the same pid replaces, a listed pid of 0 removes
 *   proc_memory_unavailable [idx]     every proc of device idx (of every device without idx)
 *                                     is listed with usedGpuMemory = NVML_VALUE_NOT_AVAILABLE,
 *                                     as NVML reports it under WDDM, MIG and some containers;
 *                                     the device's used and free memory still count them
 *   fail <nvmlFunctionName> <code>    that function returns that nvmlReturn_t code (a later
 *                                     line for the same function replaces, 0 removes)
 *
 * A device's used memory is the sum of its procs, free = total - used (at least 0), reserved 0.
 * prune_dead_pids looks at a proc's own pid (the one in this machine's /proc, which wrote the
 * line), never at the pid it is listed under.
 * Without a readable state file every call returns NVML_ERROR_DRIVER_NOT_LOADED (9), as the real
 * library does without a driver. A malformed line, or more than the limits below, makes every
 * call return NVML_ERROR_UNKNOWN (999) and say why on stderr, so a broken fixture is loud.
 *
 * WRITERS of the state file: the file is read at any moment, possibly from several threads.
 * Replace it whole (write a temporary file in the same directory, then rename() it over the
 * state file) or append whole lines, each with a single write(). Never truncate it and rewrite
 * it in place: a reader would see an empty or half-written machine.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16        /* device indices 0..15 */
#define MAX_PROCS 256      /* proc entries over all devices */
#define MAX_FAILS 32       /* fail directives */
#define MAX_PID_MAPS 256   /* pid_map directives */
#define MAX_LINE 512       /* line buffer: up to 510 bytes and a newline */
#define NAME_LEN 96        /* NVML_DEVICE_NAME_V2_BUFFER_SIZE, terminator included */
#define FN_LEN 64          /* function names in fail directives, terminator included */

typedef unsigned int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* nvml.h: #define NVML_VALUE_NOT_AVAILABLE (-1), read into an unsigned long long field. */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

/* The ABI structs, as in nvml.h. */
typedef struct {
    unsigned int version; /* must be NVML_MEMORY_V2 */
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* A device handle points at one of these; the index is its offset in the array. */
struct fake_device { char unused; };
typedef struct fake_device *nvmlDevice_t;
static struct fake_device handles[MAX_GPUS];

/* ---- the state file ---- */

struct gpu {
    int present, has_util, proc_memory_unavailable;
    unsigned long long total;
    unsigned int util_gpu, util_mem;
    char name[NAME_LEN];
};
struct proc { unsigned int idx, pid; unsigned long long bytes; };
struct fail { char fn[FN_LEN]; unsigned int code; };
struct pid_map { unsigned int pid, listed; };

struct state {
    struct gpu gpus[MAX_GPUS];
    unsigned int ngpus; /* 1 + highest declared index */
    struct proc procs[MAX_PROCS];
    unsigned int nprocs;
    struct fail fails[MAX_FAILS];
    unsigned int nfails;
    struct pid_map pid_maps[MAX_PID_MAPS];
    unsigned int npid_maps;
    unsigned int pid_offset;
    int prune_dead_pids;
};

/* The next whitespace-separated token of *p, NUL-terminated in place; NULL at end of line. */
static char *token(char **p) {
    char *s = *p, *start;
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '\0') { *p = s; return NULL; }
    start = s;
    while (*s && *s != ' ' && *s != '\t') s++;
    if (*s) *s++ = '\0';
    *p = s;
    return start;
}

/* A decimal number no greater than max. */
static int parse_uint(const char *t, unsigned long long max, unsigned long long *out) {
    unsigned long long v = 0;
    unsigned long long d;
    if (!t || !*t) return -1;
    for (; *t; t++) {
        if (*t < '0' || *t > '9') return -1;
        d = (unsigned long long)(*t - '0');
        if (d > max || v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Bytes, or a number with a K, M, G or T suffix (KiB, MiB, GiB, TiB), which may have up to 6
 * decimals ("1.5G", rounded down to a byte), as tests/workers/gpu_sim_worker.py reads sizes. */
static int parse_size(const char *t, unsigned long long *out) {
    char whole[32];
    const char *dot;
    unsigned long long w, f = 0, scale = 1;
    size_t n = t ? strlen(t) : 0, nw, i;
    unsigned int shift = 0;
    if (n == 0 || n >= sizeof whole) return -1;
    switch (t[n - 1]) {
    case 'K': case 'k': shift = 10; n--; break;
    case 'M': case 'm': shift = 20; n--; break;
    case 'G': case 'g': shift = 30; n--; break;
    case 'T': case 't': shift = 40; n--; break;
    }
    dot = memchr(t, '.', n);
    nw = dot ? (size_t)(dot - t) : n;
    memcpy(whole, t, nw);
    whole[nw] = '\0';
    if (parse_uint(whole, ~0ULL >> shift, &w)) return -1;
    if (dot) {
        if (shift == 0 || n - nw - 1 == 0 || n - nw - 1 > 6) return -1;
        for (i = nw + 1; i < n; i++) {
            if (t[i] < '0' || t[i] > '9') return -1;
            f = f * 10 + (unsigned long long)(t[i] - '0');
            scale *= 10;
        }
    }
    w <<= shift;
    f = (f << shift) / scale; /* f < 10^6 < 2^20, so no overflow */
    if (w > ~0ULL - f) return -1;
    *out = w + f;
    return 0;
}

static int parse_index(const char *t, unsigned int *idx) {
    unsigned long long v;
    if (parse_uint(t, MAX_GPUS - 1, &v)) return -1;
    *idx = (unsigned int)v;
    return 0;
}

/* Copies the rest of the line, trimmed, as a device name; cut at a UTF-8 character boundary. */
static void set_name(char *dst, char *rest) {
    size_t n;
    while (*rest == ' ' || *rest == '\t') rest++;
    n = strlen(rest);
    while (n > 0 && (rest[n - 1] == ' ' || rest[n - 1] == '\t')) n--;
    if (n == 0) { strcpy(dst, "Fake NVIDIA GPU"); return; }
    if (n > NAME_LEN - 1) {
        n = NAME_LEN - 1;
        while (n > 0 && ((unsigned char)rest[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, rest, n);
    dst[n] = '\0';
}

/* Applies one line (newline stripped); returns NULL or why it is malformed. */
static const char *apply(struct state *s, char *line) {
    char *p = line, *kw = token(&p), *fn;
    unsigned long long a, b, c;
    unsigned int idx, i;

    if (!kw || kw[0] == '#') return NULL;
    if (!strcmp(kw, "gpu")) {
        if (parse_index(token(&p), &idx)) return "gpu: index must be 0..15";
        if (parse_size(token(&p), &a)) return "gpu: bad total size";
        s->gpus[idx].present = 1;
        s->gpus[idx].total = a;
        set_name(s->gpus[idx].name, p);
        if (idx + 1 > s->ngpus) s->ngpus = idx + 1;
    } else if (!strcmp(kw, "util")) {
        if (parse_index(token(&p), &idx)) return "util: index must be 0..15";
        if (parse_uint(token(&p), 100, &a) || parse_uint(token(&p), 100, &b))
            return "util: percentages must be 0..100";
        s->gpus[idx].has_util = 1;
        s->gpus[idx].util_gpu = (unsigned int)a;
        s->gpus[idx].util_mem = (unsigned int)b;
    } else if (!strcmp(kw, "proc")) {
        if (parse_index(token(&p), &idx)) return "proc: index must be 0..15";
        if (parse_uint(token(&p), 0xFFFFFFFFu, &b)) return "proc: bad pid";
        if (parse_size(token(&p), &c)) return "proc: bad size";
        for (i = 0; i < s->nprocs; i++)
            if (s->procs[i].idx == idx && s->procs[i].pid == b) break;
        if (c == 0) {
            if (i < s->nprocs) s->procs[i] = s->procs[--s->nprocs];
        } else {
            if (i == s->nprocs) {
                if (s->nprocs == MAX_PROCS) return "too many procs (limit 256)";
                s->nprocs++;
            }
            s->procs[i].idx = idx;
            s->procs[i].pid = (unsigned int)b;
            s->procs[i].bytes = c;
        }
    } else if (!strcmp(kw, "prune_dead_pids")) {
        s->prune_dead_pids = 1;
    } else if (!strcmp(kw, "pid_offset")) {
        if (parse_uint(token(&p), 0x7FFFFFFFu, &a)) return "pid_offset: must be 0..2147483647";
        s->pid_offset = (unsigned int)a;
    } else if (!strcmp(kw, "pid_map")) {
        if (parse_uint(token(&p), 0xFFFFFFFFu, &a) || a == 0) return "pid_map: bad pid";
        if (parse_uint(token(&p), 0xFFFFFFFFu, &b)) return "pid_map: bad listed pid";
        for (i = 0; i < s->npid_maps; i++)
            if (s->pid_maps[i].pid == a) break;
        if (b == 0) {
            if (i < s->npid_maps) s->pid_maps[i] = s->pid_maps[--s->npid_maps];
        } else {
            if (i == s->npid_maps) {
                if (s->npid_maps == MAX_PID_MAPS) return "too many pid_map lines (limit 256)";
                s->npid_maps++;
            }
            s->pid_maps[i].pid = (unsigned int)a;
            s->pid_maps[i].listed = (unsigned int)b;
        }
    } else if (!strcmp(kw, "proc_memory_unavailable")) {
        if (!(fn = token(&p))) {
            for (i = 0; i < MAX_GPUS; i++) s->gpus[i].proc_memory_unavailable = 1;
        } else {
            if (parse_index(fn, &idx)) return "proc_memory_unavailable: index must be 0..15";
            s->gpus[idx].proc_memory_unavailable = 1;
        }
    } else if (!strcmp(kw, "fail")) {
        fn = token(&p);
        if (!fn || strlen(fn) >= FN_LEN) return "fail: bad function name";
        if (parse_uint(token(&p), 0xFFFFFFFFu, &a)) return "fail: bad return code";
        for (i = 0; i < s->nfails; i++)
            if (!strcmp(s->fails[i].fn, fn)) break;
        if (a == 0) {
            if (i < s->nfails) s->fails[i] = s->fails[--s->nfails];
        } else {
            if (i == s->nfails) {
                if (s->nfails == MAX_FAILS) return "too many fail lines (limit 32)";
                s->nfails++;
            }
            strcpy(s->fails[i].fn, fn);
            s->fails[i].code = (unsigned int)a;
        }
    } else {
        return "unknown directive";
    }
    if (strcmp(kw, "gpu") && token(&p)) return "unexpected text at end of line";
    return NULL;
}

/* ---- state handed over in process, instead of the file ---- */

static pthread_mutex_t given_lock = PTHREAD_MUTEX_INITIALIZER;
static int given;          /* fake_nvml_set_state was called: $FAKE_NVML_STATE is not read */
static char *given_state;  /* its text; NULL: no state, as without the file */

/* Not NVML: sets the state text (copied) that every later call reads, in place of the file
 * $FAKE_NVML_STATE names, from then on; NULL: no state (no driver). Returns 0, or -1 when out
 * of memory (the previous state is kept). For tests in the process that loaded this library;
 * they dlopen() it to find this symbol, and should keep it loaded (RTLD_NODELETE) so that the
 * state outlives every nvmlShutdown and dlclose of other users. */
int fake_nvml_set_state(const char *text) {
    char *copy = NULL;
    if (text && !(copy = strdup(text))) return -1;
    pthread_mutex_lock(&given_lock);
    free(given_state);
    given_state = copy;
    given = 1;
    pthread_mutex_unlock(&given_lock);
    return 0;
}

/* Parses the lines of f into s: NVML_SUCCESS or UNKNOWN (saying why, naming the state `name`). */
static nvmlReturn_t parse_state(struct state *s, FILE *f, const char *name) {
    char line[MAX_LINE];
    const char *why = NULL;
    unsigned int lineno = 0;
    size_t n;
    int c;

    while (!why && fgets(line, sizeof line, f)) {
        lineno++;
        n = strlen(line);
        if (n > 0 && line[n - 1] == '\n') {
            line[--n] = '\0';
        } else if ((c = getc(f)) != EOF) { /* the buffer filled before the line ended */
            why = "line too long (limit 510 bytes and a newline)";
            break;
        }
        if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
        why = apply(s, line);
    }
    if (!why && ferror(f)) why = "read error";
    if (why) {
        fprintf(stderr, "fake-nvml: %s:%u: %s\n", name, lineno, why);
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

/* Reads the state into s, from fake_nvml_set_state's text if it was called, else from the file
 * $FAKE_NVML_STATE names: NVML_SUCCESS, DRIVER_NOT_LOADED or UNKNOWN. */
static nvmlReturn_t load_state(struct state *s) {
    const char *path;
    nvmlReturn_t rc;
    FILE *f;

    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&given_lock);
    if (given) {
        if (!given_state) {
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
        } else if (!*given_state) {
            rc = NVML_SUCCESS; /* an empty machine; fmemopen may refuse a size of 0 */
        } else if (!(f = fmemopen(given_state, strlen(given_state), "r"))) {
            fprintf(stderr, "fake-nvml: fmemopen of the given state failed\n");
            rc = NVML_ERROR_UNKNOWN;
        } else {
            rc = parse_state(s, f, "(fake_nvml_set_state)");
            fclose(f);
        }
        pthread_mutex_unlock(&given_lock);
        return rc;
    }
    pthread_mutex_unlock(&given_lock);
    path = getenv("FAKE_NVML_STATE");
    if (!path || !*path || !(f = fopen(path, "r"))) return NVML_ERROR_DRIVER_NOT_LOADED;
    rc = parse_state(s, f, path);
    fclose(f);
    return rc;
}

static int pid_alive(unsigned int pid) {
    char path[32], buf[512], *rp;
    size_t n;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    if (!(f = fopen(path, "r"))) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the state letter follows the last ')'. */
    rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ') return 1;
    return !(rp[2] == 'Z' || rp[2] == 'X' || rp[2] == 'x');
}

/* The procs of device idx, after prune_dead_pids; returns how many were put in out. */
static unsigned int device_procs(const struct state *s, unsigned int idx, struct proc *out) {
    unsigned int i, n = 0;
    for (i = 0; i < s->nprocs; i++) {
        if (s->procs[i].idx != idx) continue;
        if (s->prune_dead_pids && !pid_alive(s->procs[i].pid)) continue;
        out[n++] = s->procs[i];
    }
    return n;
}

/* The pid NVML lists a proc under: its pid_map, else pid + pid_offset (wrapping as the
 * unsigned field does, though the offset's limit keeps real pids clear of that). */
static unsigned int listed_pid(const struct state *s, unsigned int pid) {
    unsigned int i;
    for (i = 0; i < s->npid_maps; i++)
        if (s->pid_maps[i].pid == pid) return s->pid_maps[i].listed;
    return pid + s->pid_offset;
}

/* ---- call bookkeeping ---- */

static atomic_int init_count; /* nvmlInit_v2 minus nvmlShutdown calls, as NVML refcounts */

static unsigned int fail_code(const struct state *s, const char *fn) {
    unsigned int i;
    for (i = 0; i < s->nfails; i++)
        if (!strcmp(s->fails[i].fn, fn)) return s->fails[i].code;
    return NVML_SUCCESS;
}

/* Every call but init and shutdown starts here: initialized, state readable, no fail line. */
static nvmlReturn_t enter(const char *fn, struct state *s) {
    nvmlReturn_t rc;
    if (atomic_load(&init_count) <= 0) return NVML_ERROR_UNINITIALIZED;
    if ((rc = load_state(s))) return rc;
    return fail_code(s, fn);
}

/* The index of a handle this library gave out, if that device is still in the state. */
static nvmlReturn_t device_index(const struct state *s, nvmlDevice_t dev, unsigned int *idx) {
    uintptr_t p = (uintptr_t)dev, first = (uintptr_t)handles;
    if (p < first || p >= first + sizeof handles || (p - first) % sizeof handles[0])
        return NVML_ERROR_INVALID_ARGUMENT;
    *idx = (unsigned int)((p - first) / sizeof handles[0]);
    return s->gpus[*idx].present ? NVML_SUCCESS : NVML_ERROR_GPU_IS_LOST;
}

#define ENTER(s)                                      \
    struct state s;                                   \
    do {                                              \
        nvmlReturn_t rc_ = enter(__func__, &s);       \
        if (rc_) return rc_;                          \
    } while (0)

/* ---- the exported NVML API ---- */

nvmlReturn_t nvmlInit_v2(void) {
    struct state s;
    nvmlReturn_t rc = load_state(&s);
    if (rc) return rc;
    if ((rc = fail_code(&s, __func__))) return rc;
    atomic_fetch_add(&init_count, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    struct state s;
    nvmlReturn_t rc;
    if (atomic_load(&init_count) <= 0) return NVML_ERROR_UNINITIALIZED;
    /* A missing state file does not stop a shutdown; a fail line does. */
    if (load_state(&s) == NVML_SUCCESS && (rc = fail_code(&s, __func__))) return rc;
    atomic_fetch_sub(&init_count, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    static const char v[] = "550.54.15";
    ENTER(s);
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < sizeof v) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(version, v, sizeof v);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER(s);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = s.ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(s);
    if (!device || index >= MAX_GPUS || !s.gpus[index].present) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    unsigned int idx;
    nvmlReturn_t rc;
    ENTER(s);
    if ((rc = device_index(&s, device, &idx))) return rc;
    if (!name) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s.gpus[idx].name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, s.gpus[idx].name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    struct proc procs[MAX_PROCS];
    unsigned long long used = 0, total;
    unsigned int idx, i, n;
    nvmlReturn_t rc;
    ENTER(s);
    if ((rc = device_index(&s, device, &idx))) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    n = device_procs(&s, idx, procs);
    for (i = 0; i < n; i++)
        used = used + procs[i].bytes < used ? ~0ULL : used + procs[i].bytes;
    total = s.gpus[idx].total;
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    unsigned int idx;
    nvmlReturn_t rc;
    ENTER(s);
    if ((rc = device_index(&s, device, &idx))) return rc;
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (!s.gpus[idx].has_util) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = s.gpus[idx].util_gpu;
    utilization->memory = s.gpus[idx].util_mem;
    return NVML_SUCCESS;
}

/* Asked with *infoCount too small (nvml-wrapper first passes 0 and NULL): the count needed and
 * INSUFFICIENT_SIZE, or SUCCESS when there are none, as the real library does. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    struct proc procs[MAX_PROCS];
    unsigned int idx, i, n;
    nvmlReturn_t rc;
    ENTER(s);
    if ((rc = device_index(&s, device, &idx))) return rc;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    n = device_procs(&s, idx, procs);
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !infos) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++) {
        infos[i].pid = listed_pid(&s, procs[i].pid);
        infos[i].usedGpuMemory =
            s.gpus[idx].proc_memory_unavailable ? NVML_VALUE_NOT_AVAILABLE : procs[i].bytes;
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}
