#include "backend/metal/sim_fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "core/errors.h"

#if MB_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if MB_SIM_ASM_FIBERS
// mb_sim_switch(void** save_sp, void* new_sp): pushes the callee-saved registers and the SSE / x87
// control words, stores the stack pointer, switches to new_sp and pops the same frame from there.
// mb_sim_trampoline starts a prepared fiber: fn in r13, arg in r12.
asm(R"(
  .text
  .p2align 4
  .globl mb_sim_switch
  .hidden mb_sim_switch
  .type mb_sim_switch,@function
mb_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mb_sim_switch, .-mb_sim_switch

  .p2align 4
  .globl mb_sim_trampoline
  .hidden mb_sim_trampoline
  .type mb_sim_trampoline,@function
mb_sim_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size mb_sim_trampoline, .-mb_sim_trampoline
  .section .note.GNU-stack,"",@progbits
  .text
)");
extern "C" void mb_sim_switch(void** save_sp, void* new_sp);
extern "C" void mb_sim_trampoline();
#endif

namespace mb::metal::sim {

FiberStack::FiberStack(size_t bytes) {
  if (MB_SIM_ASAN) bytes *= 4;  // ASan's redzones make every frame several times larger
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  map_bytes_ = size_ + page;
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw DeviceError(cat("metal-sim: cannot map a ", map_bytes_, "-byte fiber stack"));
  map_ = static_cast<char*>(p);
  mprotect(map_, page, PROT_NONE);  // guard page below the stack (stacks grow down)
  lo_ = map_ + page;
}

FiberStack::~FiberStack() {
  if (map_) munmap(map_, map_bytes_);
}

namespace {

thread_local FiberContext* t_switched_from = nullptr;  // the context that made the latest switch

// Tells ASan the switch from the running stack to `to` is done, and learns the bounds of the stack left.
void finish_switch([[maybe_unused]] void* fake_stack) {
#if MB_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, &t_switched_from->stack_bottom, &t_switched_from->stack_size);
#endif
}

// Where every prepared fiber starts: completes the switch that started it, then runs its function.
void fiber_entry(void* context) {
  auto* ctx = static_cast<FiberContext*>(context);
  finish_switch(nullptr);
  ctx->fn(ctx->arg);
  std::abort();  // fn switches away for good and never returns
}

void raw_switch(FiberContext& from, FiberContext& to);

// `keep`: the running fiber will be resumed (ASan keeps its fake stack); false frees it.
void annotated_switch(FiberContext& from, FiberContext& to, bool keep) {
#if MB_SIM_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(keep ? &fake_stack : nullptr, to.stack_bottom, to.stack_size);
  t_switched_from = &from;
  raw_switch(from, to);
  finish_switch(fake_stack);
#else
  raw_switch(from, to);
#endif
}

}  // namespace

void fiber_abandoned([[maybe_unused]] FiberStack& stack) {
#if MB_SIM_ASAN
  __asan_unpoison_memory_region(stack.lo(), stack.size());
#endif
}

void fiber_switch(FiberContext& from, FiberContext& to) { annotated_switch(from, to, true); }
void fiber_exit(FiberContext& from, FiberContext& to) { annotated_switch(from, to, false); }

#if MB_SIM_ASM_FIBERS

void fiber_prepare(FiberContext& ctx, FiberStack& stack, void (*fn)(void*), void* arg) {
  // Frame popped by mb_sim_switch (low to high): fpcw, mxcsr | r15 r14 r13 r12 rbx rbp | return address.
  // After `ret` into the trampoline rsp must be 16-byte aligned, so its `call` enters fn as the ABI wants.
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack.lo()) + stack.size()) & ~uintptr_t(15);
  uintptr_t after_ret = top - 16;
  auto* f = reinterpret_cast<uint64_t*>(after_ret - 72);
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  f[0] = fpcw;
  f[1] = mxcsr;
  f[2] = 0;                                      // r15
  f[3] = 0;                                      // r14
  f[4] = reinterpret_cast<uint64_t>(&fiber_entry);  // r13
  f[5] = reinterpret_cast<uint64_t>(&ctx);          // r12
  f[6] = 0;                                      // rbx
  f[7] = 0;                                      // rbp
  f[8] = reinterpret_cast<uint64_t>(&mb_sim_trampoline);
  ctx.sp = f;
  ctx.fn = fn;
  ctx.arg = arg;
  ctx.stack_bottom = stack.lo();
  ctx.stack_size = stack.size();
}

namespace {
void raw_switch(FiberContext& from, FiberContext& to) { mb_sim_switch(&from.sp, to.sp); }
}  // namespace

#else

static void ucontext_entry(unsigned hi, unsigned lo) {
  fiber_entry(reinterpret_cast<FiberContext*>((uintptr_t(hi) << 32) | uintptr_t(lo)));
}

void fiber_prepare(FiberContext& ctx, FiberStack& stack, void (*fn)(void*), void* arg) {
  if (getcontext(&ctx.uc) != 0) throw DeviceError("metal-sim: getcontext failed");
  ctx.uc.uc_stack.ss_sp = stack.lo();
  ctx.uc.uc_stack.ss_size = stack.size();
  ctx.uc.uc_link = nullptr;
  ctx.fn = fn;
  ctx.arg = arg;
  ctx.stack_bottom = stack.lo();
  ctx.stack_size = stack.size();
  uintptr_t p = reinterpret_cast<uintptr_t>(&ctx);
  makecontext(&ctx.uc, reinterpret_cast<void (*)()>(&ucontext_entry), 2, unsigned(uint64_t(p) >> 32), unsigned(p & 0xffffffffu));
}

namespace {
void raw_switch(FiberContext& from, FiberContext& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) std::abort();
}
}  // namespace

#endif

}  // namespace mb::metal::sim
