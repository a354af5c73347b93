// Per-op profile: where a training step's time and memory go, per op type, forward and backward.
//
//   tg::profile::enable();            // or run any program with TAPEGRAD_PROFILE=1
//   ... training steps ...
//   fmt::print("{}", tg::profile::report());   // the table; TAPEGRAD_PROFILE=1 prints it at exit
//
// What is measured (wall clock, so OpenMP threads inside an op count once):
//  - backward: each tape node's backward rule, timed exactly, under the node's op name.
//  - forward: an op is recorded on the tape right after it computed its output, so the forward time
//    of an op is the time since the previous profile event (the previous recorded op, the end of a
//    backward pass, or a mark()). Work that records no node (mask building, ops on tensors that need
//    no gradient) is therefore counted in the next recorded op; mark(name) closes such a gap under
//    its own name (bench_train marks "optimizer" and "(loss.item, batch)").
//  - "(tape clear)": freeing the tape's saved tensors at the end of backward().
//  - bytes: tensor storage requested (from the pool or fresh) during the op, forward and backward;
//    "new" counts pool misses, i.e. real allocations (0 in a steady-state step).
// Only the thread that runs the tape is profiled. Overhead: two clock reads per op.
#pragma once

#include <cstdint>
#include <string>

namespace tg::profile {

void enable(bool on = true);
bool enabled();
void reset();  // drops the counts gathered so far

// Closes the current forward gap under `name` (a string literal: its pointer is kept).
void mark(const char* name);

// The table: one row per op type, sorted by total time, times per step (steps = backward passes
// seen while enabled; 1 if none), plus a totals row.
std::string report();

// Internal hooks (autograd/tape.cpp, tensor.cpp).
namespace detail {
extern bool g_on;
void on_record(const char* op);                     // a forward op just recorded its node
void on_backward_node(const char* op, int64_t ns);  // one node's backward took ns
void on_backward_begin();
void on_backward_end(int64_t clear_ns);
void on_alloc(int64_t bytes, bool miss);
int64_t now_ns();
}  // namespace detail

}  // namespace tg::profile
