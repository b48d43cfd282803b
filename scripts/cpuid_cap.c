/*
 * Caps the instruction sets a peer engine (ONNX Runtime, LiteRT/XNNPACK, ncnn) sees, so
 * that nnc's AVX2 paths (NNC_MAX_ISA=avx2) can be timed against the peers' AVX2 paths on
 * the same AVX-512 core, in the same run. None of the peers has a switch for this:
 * each reads the CPUID instruction once and picks its kernels.
 *
 * How: loaded with LD_PRELOAD, a constructor turns on CPUID faulting for the process
 * (arch_prctl ARCH_SET_CPUID; the processor must list `cpuid_fault`, and the setting
 * is inherited by every thread created afterwards), so each CPUID raises SIGSEGV. The
 * handler executes the real CPUID with faulting briefly off, clears the feature bits
 * above the chosen level and resumes after the instruction. glibc chose its string
 * functions before the constructor ran; that is the only code left on the full set.
 *
 * PEER_MAX_ISA selects the level:
 *   avx2      no AVX-512 of any kind, no AVX-VNNI, no AMX, no AVX10 (Zen 2/3, Skylake
 *             client parts)
 *   avxvnni   avx2 plus the 256-bit AVX-VNNI dot products (Alder Lake client parts)
 *   avx512    AVX-512 with VNNI and BF16 kept, AMX removed (Cascade Lake to Zen 4)
 * Build: cc -O2 -shared -fPIC -o libcpuid_cap.so cpuid_cap.c (scripts/peer-cap does it).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

/* Leaf 7, subleaf 0. */
static const uint32_t AVX512_EBX = BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) |
                                   BIT(30) | BIT(31); /* F DQ IFMA PF ER CD BW VL */
static const uint32_t AVX512_ECX = BIT(1) | BIT(6) | BIT(11) | BIT(12) |
                                   BIT(14); /* VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
static const uint32_t AVX512_EDX = BIT(2) | BIT(3) | BIT(8) |
                                   BIT(23); /* 4VNNIW 4FMAPS VP2INTERSECT FP16 */
static const uint32_t AMX_EDX = BIT(22) | BIT(24) | BIT(25); /* BF16 TILE INT8 */
/* Leaf 7, subleaf 1. */
static const uint32_t AVX_VNNI_EAX = BIT(4);
static const uint32_t AVX512_BF16_EAX = BIT(5);
static const uint32_t AMX_EAX = BIT(21); /* AMX-FP16 */
static const uint32_t AVX_IFMA_EAX = BIT(23);
static const uint32_t AVX_VNNI_INT8_EDX = BIT(4) | BIT(5); /* and AVX-NE-CONVERT */
static const uint32_t AMX_COMPLEX_EDX = BIT(8);
static const uint32_t AVX10_EDX = BIT(19);

enum level { CAP_AVX2, CAP_AVXVNNI, CAP_AVX512 };
static enum level cap_level;

static void set_faulting(int on) { syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

static void mask(uint32_t leaf, uint32_t subleaf, uint32_t *a, uint32_t *b, uint32_t *c,
                 uint32_t *d) {
    if (leaf == 7 && subleaf == 0) {
        *d &= ~AMX_EDX;
        if (cap_level != CAP_AVX512) {
            *b &= ~AVX512_EBX;
            *c &= ~AVX512_ECX;
            *d &= ~AVX512_EDX;
        }
    } else if (leaf == 7 && subleaf == 1) {
        *a &= ~AMX_EAX;
        *d &= ~(AMX_COMPLEX_EDX | AVX10_EDX);
        if (cap_level != CAP_AVX512) {
            *a &= ~(AVX512_BF16_EAX | AVX_IFMA_EAX);
            *d &= ~AVX_VNNI_INT8_EDX;
            if (cap_level == CAP_AVX2) *a &= ~AVX_VNNI_EAX;
        }
    } else if (leaf == 0x1e || leaf == 0x1d || leaf == 0x24) {
        /* AMX tile and AVX10 description leaves: nothing to describe any more. */
        *a = *b = *c = *d = 0;
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) {
        /* A real fault: let it terminate the process as it would have. */
        signal(sig, SIG_DFL);
        return;
    }
    uint32_t leaf = (uint32_t)regs[REG_RAX], subleaf = (uint32_t)regs[REG_RCX];
    uint32_t a, b, c, d;
    set_faulting(0);
    __cpuid_count(leaf, subleaf, a, b, c, d);
    set_faulting(1);
    mask(leaf, subleaf, &a, &b, &c, &d);
    regs[REG_RAX] = a;
    regs[REG_RBX] = b;
    regs[REG_RCX] = c;
    regs[REG_RDX] = d;
    regs[REG_RIP] += 2;
}

__attribute__((constructor)) static void install(void) {
    const char *want = getenv("PEER_MAX_ISA");
    if (want == NULL || *want == '\0') return;
    if (strcmp(want, "avx2") == 0) {
        cap_level = CAP_AVX2;
    } else if (strcmp(want, "avxvnni") == 0) {
        cap_level = CAP_AVXVNNI;
    } else if (strcmp(want, "avx512") == 0) {
        cap_level = CAP_AVX512;
    } else {
        fprintf(stderr, "cpuid_cap: PEER_MAX_ISA must be avx2, avxvnni or avx512, not '%s'\n", want);
        _exit(2);
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, NULL) != 0 ||
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        fprintf(stderr, "cpuid_cap: this processor or kernel cannot fault on CPUID "
                        "(no cpuid_fault in /proc/cpuinfo): the peers cannot be capped\n");
        _exit(2);
    }
}
