// Parity of the GPT with PyTorch: the same checkpoint and batch through our GPT and through a
// nanoGPT-style model in PyTorch (tests/nn/gpt_torch_parity.py, run with /usr/bin/python3, which
// has Debian's python3-torch, or TAPEGRAD_TEST_PYTHON). The script loads our checkpoint file with
// the recipe of nn/gpt.md, and writes the model after one AdamW step back as a checkpoint, which
// we load: both directions of the format, the loss, every gradient and one optimizer step.
// SKIPPED when torch is not importable; CI requires it to run.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "autograd/tape.hpp"
#include "nn/family/gpt_family.hpp"
#include "nn/optim.hpp"
#include "nn_test_util.hpp"
#include "tests/python.hpp"
#include "tests/skip.hpp"

using namespace tg;
using namespace tg::nn;
namespace fs = std::filesystem;

namespace {

void run_gpt_parity(const std::string& kind) {
  const std::shared_ptr<const Tokenizer> tok = make_lm_tokenizer(kind, {"abcdefghijklm"});
  GptConfig c;
  c.vocab_size = tok->vocab_size();
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  GPT m(c, 21);
  Generator g(22);
  for (auto& [n, p] : m.named_parameters())  // non-trivial layernorm gains and biases
    if (n.find("bias") != std::string::npos || n.find("ln_") != std::string::npos) {
      Tensor t = p;
      const bool w = n.ends_with("weight");
      uniform_(t, w ? 0.5f : -0.3f, w ? 1.5f : 0.3f, g);
    }
  const int64_t B = 3, T = 12;
  const float lr = 1e-3f, wd = 0.1f;
  std::vector<int32_t> x(B * T), y(B * T);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(g.below(static_cast<uint64_t>(c.vocab_size)));
    y[i] = static_cast<int32_t>(g.below(static_cast<uint64_t>(c.vocab_size)));
  }

  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_gpt_parity_{}", ::getpid());
  fs::create_directories(dir);
  const fs::path model = dir / "m.safetensors", batch = dir / "batch.txt", out = dir / "torch.txt",
                 stepped = dir / "stepped.safetensors";
  GptCheckpointInfo info;
  info.config = c;
  info.tokenizer = tok;
  save_gpt_checkpoint(model.string(), m, info);
  {
    std::ofstream f(batch);
    f << fmt::format("{} {} {:.9g} {:.9g}\n{}\n{}\n", B, T, lr, wd, fmt::join(x, " "), fmt::join(y, " "));
  }
  const std::string cmd =
      fmt::format("{} {}/tests/nn/gpt_torch_parity.py {} {} {} {}", testing::python(), TG_SOURCE_DIR,
                  model.string(), batch.string(), out.string(), stepped.string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " << cmd);
  const test::TorchReference torch = test::read_torch_reference(out.string());
  const GptCheckpoint torch_ck = read_gpt_checkpoint(stepped.string());
  const auto torch_model = load_gpt(torch_ck, stepped.string());
  fs::remove_all(dir);

  m.train();
  m.zero_grad();
  const Tensor loss = m.loss(x, y, B, T);
  backward(loss);
  const double ours = loss.item(), loss_rel = std::abs(ours - torch.loss) / std::abs(torch.loss);
  MESSAGE(fmt::format("torch {} ({} tokenizer): loss ours {:.8f} torch {:.8f} (rel {:.2e})", torch.version,
                      tok->kind(), ours, torch.loss, loss_rel));
  CHECK(loss_rel <= 1e-5);

  const NamedTensors params = m.named_parameters();
  const auto [worst_name, worst_grad] = test::worst_gradient(params, torch);
  INFO("worst gradient: ", worst_name);
  CHECK(worst_grad <= 1e-4);

  // One step as lm train takes it: clip to norm 1, AdamW with decay on matrices only.
  clip_grad_norm(params, 1.0);
  AdamW opt(params, {.lr = lr,
                     .beta1 = 0.9f,
                     .beta2 = 0.99f,
                     .eps = 1e-8f,
                     .weight_decay = wd,
                     .decay_matrices_only = true});
  opt.step();
  double worst_step = 0;
  for (const auto& [n, p] : params) {
    INFO(n);
    const Tensor theirs = torch_model->parameter(n);
    double d = 0;
    for (int64_t i = 0; i < p.numel(); ++i)
      d = std::max(d, static_cast<double>(std::abs(p.data()[i] - theirs.data()[i])));
    worst_step = std::max(worst_step, d);
    CHECK(d <= 1e-5);
  }
  MESSAGE(
      fmt::format("largest gradient difference {:.2e} (of the tensor's largest, {}); after one AdamW step "
                  "(lr {}) the largest parameter difference is {:.2e}",
                  worst_grad, worst_name, lr, worst_step));
}

}  // namespace

TEST_CASE("nn.gpt.parity.torch") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  SUBCASE("byte tokenizer") {
    run_gpt_parity("byte");
  }
  SUBCASE("char tokenizer") {
    run_gpt_parity("char");
  }
}
