// train/distributed without mpirun: batch sharding, the one-rank World, per-rank dropout streams, and
// what a build without MPI says about MPI options. (Several ranks: tests/mpi/mpi_train.sh.)
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "autograd/functions.hpp"
#include "tests/skip.hpp"
#include "train/distributed.hpp"

using namespace tg;
using namespace tg::nn;

TEST_CASE("dist.shard covers the batch in order with sizes differing by at most one") {
  for (int64_t n : {0, 1, 2, 5, 24, 64, 65})
    for (int size : {1, 2, 3, 4, 7}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < size; ++r) {
        const auto [lo, hi] = dist::shard(n, r, size);
        CHECK(lo == next);
        CHECK(hi >= lo);
        smallest = std::min(smallest, hi - lo);
        largest = std::max(largest, hi - lo);
        next = hi;
      }
      CHECK(next == n);
      CHECK(largest - smallest <= 1);
    }
}

TEST_CASE("dist.slice_rows takes whole rows of every field") {
  Batch b;
  b.batch = 3, b.src_len = 2, b.tgt_len = 3;
  b.src = {1, 2, 3, 4, 5, 6};
  b.tgt_in = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  b.labels = {20, 21, 22, 23, 24, 25, 26, 27, 28};
  const Batch s = dist::slice_rows(b, 1, 3);
  CHECK(s.batch == 2);
  CHECK(s.src == std::vector<int32_t>{3, 4, 5, 6});
  CHECK(s.tgt_in == std::vector<int32_t>{13, 14, 15, 16, 17, 18});
  CHECK(s.labels == std::vector<int32_t>{23, 24, 25, 26, 27, 28});
  s.validate();
  CHECK(dist::slice_rows(b, 2, 2).batch == 0);
}

TEST_CASE("dist.World outside mpirun is one rank and changes nothing") {
  dist::World world;
  CHECK(world.size() == 1);
  CHECK(world.rank() == 0);
  CHECK(world.is_root());
  CHECK_FALSE(world.distributed());
  Tensor p = Tensor::from_data({3}, {1, 2, 3}).requires_grad_();
  sum(mul(p, p)).backward();  // grad 2p
  const NamedTensors params = {{"p", p}};
  double extra = 5;
  CHECK(world.allreduce_gradients(params, 7, {&extra, 1}) == 7);
  CHECK(extra == 5);
  CHECK(p.grad().to_vector() == std::vector<float>{2, 4, 6});
  double v[2] = {1, 2};
  world.allreduce_sum(v);
  CHECK(v[1] == 2);
  CHECK(world.stats().calls == 0);
  CHECK(dist::default_threads(world) >= 1);
}

TEST_CASE("dist.fork_step_rng: a stream per rank, the next shared state from the shared state alone") {
  Generator a(42), b(42);
  const Generator::State shared = dist::fork_step_rng(a, 0);
  dist::fork_step_rng(b, 1);
  CHECK(a.next_u64() != b.next_u64());        // ranks draw different dropout masks
  for (int i = 0; i < 10; ++i) b.next_u64();  // however many numbers a rank drew...
  dist::join_step_rng(a, shared);
  dist::join_step_rng(b, shared);
  CHECK(a.next_u64() == b.next_u64());  // ...all ranks continue from the same state
  Generator c(42);
  dist::fork_step_rng(c, 0);
  Generator d(42);
  CHECK(c.state().s != d.state().s);
}

#ifndef TAPEGRAD_HAVE_MPI
TEST_CASE("dist: a build without MPI refuses mpirun with several ranks and MPI options") {
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  CHECK_THROWS_WITH_AS(dist::World(), doctest::Contains("needs a build with MPI"), std::runtime_error);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST_CASE("dist.cli: a build without MPI refuses MPI options") {
  const std::string translate = TG_TRANSLATE;
  if (!std::filesystem::exists(translate))
    TG_SKIP(translate + " is not built (meson configure -Dexamples=true)");
  const std::string err = (std::filesystem::temp_directory_path() / "tapegrad_dist_test.err").string();
  const int rc =
      std::system((translate + " train --data x.tsv --out x.safetensors --bucket-mb 4 2>" + err).c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  std::FILE* f = std::fopen(err.c_str(), "r");
  REQUIRE(f);
  char text[512] = {};
  CHECK(std::fread(text, 1, sizeof text - 1, f) > 0);
  std::fclose(f);
  std::filesystem::remove(err);
  CHECK(std::string(text).find("--bucket-mb needs a build with MPI") != std::string::npos);
}
#endif
