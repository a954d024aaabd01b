/* The native stack of a crash, where no debugger is installed (the H100 image has no gdb).
 *
 *   gcc -shared -fPIC -O0 -g -o segv_backtrace.so bench/segv_backtrace.c
 *   LD_PRELOAD=$PWD/segv_backtrace.so python3 bench/fa3_error_probe.py ... 2> crash.txt
 *   python3 bench/symbolize.py crash.txt   # each "#N object +offset" line through addr2line
 *
 * On SIGSEGV/SIGBUS/SIGABRT it writes the faulting address, the program counter and the object
 * that holds it, then the frames glibc's backtrace() can walk, each as object + offset, and
 * re-raises the signal (the exit status stays the crash's). Only async-signal-safe calls are made
 * before backtrace(), which itself may fail if the unwinder is what crashed: the program counter
 * line comes first for that reason. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static char alt_stack[1 << 16];

static void say(const char *text) { (void)!write(2, text, strlen(text)); }

static void where(const char *label, void *pc) {
    char line[1024];
    Dl_info info;
    if (dladdr(pc, &info) && info.dli_fname) {
        snprintf(line, sizeof line, "%s %s +%#lx (%s)\n", label, info.dli_fname,
                 (unsigned long)((char *)pc - (char *)info.dli_fbase),
                 info.dli_sname ? info.dli_sname : "?");
    } else {
        snprintf(line, sizeof line, "%s %p (no object)\n", label, pc);
    }
    say(line);
}

static void report(int sig, siginfo_t *info, void *context) {
    char line[256];
    ucontext_t *uc = (ucontext_t *)context;
    void *pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
    snprintf(line, sizeof line, "segv_backtrace: signal %d, fault address %p, pc %p\n", sig,
             info->si_addr, pc);
    say(line);
    where("#pc", pc);
    void *frames[96];
    int n = backtrace(frames, 96);
    for (int i = 0; i < n; i++) {
        snprintf(line, sizeof line, "#%d", i);
        where(line, frames[i]);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void install(void) {
    stack_t stack = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack};
    sigaltstack(&stack, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = report;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, NULL);
    sigaction(SIGBUS, &action, NULL);
    sigaction(SIGABRT, &action, NULL);
}
