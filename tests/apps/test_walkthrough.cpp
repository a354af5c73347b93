// apps/attention_walkthrough end to end: the numbers it prints (--json) against the library's
// own forward and backward computed here independently (nn::MultiHeadAttention's parameters, the
// attention tape ops, the softmax backward kernel); its checks pass, and fail where a deliberately
// wrong backward rule breaks them; the text, the page, the DOT; bad command lines and files.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/attention.hpp"
#include "nn/layers.hpp"
#include "ops/kernels.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;
using Json = nlohmann::json;

namespace {

Run walkthrough(const std::string& args, const std::string& prefix = "") {
  return run_program(kWalkthrough, args, "", prefix);
}

// Whether the walkthrough is built; when it is not, the calling case is SKIPPED and must return.
bool have_walkthrough() {
  if (std::filesystem::exists(kWalkthrough)) return true;
  testing::skip_test_case(kWalkthrough + " is not built (meson configure -Dexamples=true)");
  return false;
}

const Json& step(const Json& j, const std::string& id) {
  for (const Json& s : j.at("sections"))
    for (const Json& st : s.at("steps"))
      if (st.at("id") == id) return st;
  FAIL("no step ", id, " in the JSON");
  throw std::logic_error("unreachable");
}

// Matrix k of step `id` as a [rows, cols] tensor (null = -inf).
Tensor matrix(const Json& j, const std::string& id, size_t k = 0) {
  const Json& m = step(j, id).at("matrices").at(k);
  const int64_t R = m.at("shape")[0], C = m.at("shape")[1];
  std::vector<float> v;
  for (const Json& row : m.at("values"))
    for (const Json& x : row)
      v.push_back(x.is_null() ? -std::numeric_limits<float>::infinity() : x.get<float>());
  REQUIRE(static_cast<int64_t>(v.size()) == R * C);
  return Tensor::from_data({R, C}, v);
}

// The per-head matrices of step `id` stacked: [H, rows, cols].
Tensor heads(const Json& j, const std::string& id) {
  std::vector<Tensor> hs;
  for (size_t k = 0; k < step(j, id).at("matrices").size(); ++k) {
    const Tensor m = matrix(j, id, k);
    hs.push_back(reshape(m, {1, m.size(0), m.size(1)}));
  }
  return concat(hs, 0);
}

// The printed values that differ from the library's: their names, and the differences.
struct Mismatches {
  std::string names, details;
};

// Whether printed and library values agree to float rounding (two summation orders of the same
// products); a disagreement is appended to `m`.
void compare(Mismatches& m, const std::string& what, const Tensor& printed, const Tensor& library) {
  REQUIRE_MESSAGE(printed.numel() == library.numel(), what, ": printed ", shape_str(printed.shape()),
                  " library ", shape_str(library.shape()));
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < printed.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(printed.data()[i]) - library.data()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(library.data()[i])));
  }
  if (diff <= 1e-5 * scale) return;
  m.names += (m.names.empty() ? "" : " ") + what;
  m.details += fmt::format("{} differs: max |diff| {:.3g}, max |library value| {:.3g}\n", what, diff, scale);
}

// Columns [k d, (k+1) d) of a [1, T, 3d] projection, as [T, d].
Tensor block(const Tensor& qkv, int64_t k, int64_t d) {
  return reshape(slice(qkv, 2, k * d, (k + 1) * d), {qkv.size(1), d});
}

// The walkthrough's --json numbers against the engine computed here: the printed weights loaded into
// an nn::MultiHeadAttention, its fused projection, attention_probs, attention_context, its output
// projection, the layer norm, L = sum(G * Z), one backward().
Mismatches mismatches(const Json& j) {
  Mismatches out;
  const int64_t d = j.at("model").at("d_model"), H = j.at("model").at("heads"), dk = d / H;
  const bool pre = j.at("model").at("norm_first"), causal = j.at("mask") == "causal";
  const Tensor X = matrix(j, "X"), G = matrix(j, "dZ");
  const int64_t T = X.size(0);
  Generator gen(0);
  nn::MultiHeadAttention mha(d, H, 0.0f, gen);
  const Tensor W = concat({matrix(j, "W_qkv", 0), matrix(j, "W_qkv", 1), matrix(j, "W_qkv", 2)}, 0);
  std::copy_n(W.data(), W.numel(), mha.in_proj_weight.data());
  std::copy_n(matrix(j, "W_qkv", 3).data(), 3 * d, mha.in_proj_bias.data());
  std::copy_n(matrix(j, "W_o", 0).data(), d * d, mha.out_proj.weight.data());
  std::copy_n(matrix(j, "W_o", 1).data(), d, mha.out_proj.bias.data());
  const Tensor norm = matrix(j, "Z", 1);
  const Tensor gamma = reshape(slice(norm, 0, 0, 1), {d}), beta = reshape(slice(norm, 0, 1, 2), {d});

  const Tensor x = reshape(X, {1, T, d});
  const Tensor A = pre ? layernorm(x, gamma, beta) : x;
  Tensor qkv = linear(A, mha.in_proj_weight, mha.in_proj_bias);
  const AttentionSpec spec{.heads = H,
                           .d_head = dk,
                           .k_col = d,
                           .v_col = 2 * d,
                           .scale = 1.0f / std::sqrt(static_cast<float>(dk)),
                           .causal = causal};
  Tensor P = attention_probs(qkv, qkv, spec);
  Tensor O = attention_context(P, qkv, spec);
  Tensor Y = mha.out_proj.forward(O);
  for (Tensor* t : {&qkv, &P, &O, &Y}) t->retain_grad();
  const Tensor Z = pre ? x + Y : layernorm(x + Y, gamma, beta);
  backward(sum(Z * G));
  {
    NoGradGuard no_grad;
    compare(out, "Y of nn::MultiHeadAttention::self_attention", matrix(j, "Y"),
            mha.self_attention(A, causal));
  }
  compare(out, "PE", matrix(j, "PE"), slice(nn::PositionalEncoding(d, T).table(), 0, 0, T));
  compare(out, "Q", matrix(j, "Q"), block(qkv, 0, d));
  compare(out, "K", matrix(j, "K"), block(qkv, 1, d));
  compare(out, "V", matrix(j, "V"), block(qkv, 2, d));
  compare(out, "P", heads(j, "P"), P);
  compare(out, "O", matrix(j, "O"), O);
  compare(out, "Y", matrix(j, "Y"), Y);
  compare(out, "Z", matrix(j, "Z"), Z);
  compare(out, "dY", matrix(j, "dY"), Y.grad());
  compare(out, "dO", matrix(j, "dO"), O.grad());
  compare(out, "dP", heads(j, "dP"), P.grad());
  // dS through the engine's softmax backward kernel: dS = P * (dP - rowsum(dP * P)).
  Tensor dS = Tensor::empty(P.shape());
  ops::softmax_backward(dS.data(), P.grad().data(), P.data(), H * T, T, true);
  compare(out, "dS", heads(j, "dS"), dS);
  compare(out, "dQ", matrix(j, "dQ"), block(qkv.grad(), 0, d));
  compare(out, "dK", matrix(j, "dK"), block(qkv.grad(), 1, d));
  compare(out, "dV", matrix(j, "dV"), block(qkv.grad(), 2, d));
  const Tensor dW = mha.in_proj_weight.grad();
  compare(out, "dW_q", matrix(j, "dW_q"), slice(dW, 0, 0, d));
  compare(out, "dW_k", matrix(j, "dW_k"), slice(dW, 0, d, 2 * d));
  compare(out, "dW_v", matrix(j, "dW_v"), slice(dW, 0, 2 * d, 3 * d));
  compare(out, "dW_o", matrix(j, "dW_o"), mha.out_proj.weight.grad());
  return out;
}

// Every gradient check and every agreement of the run passed (and there are some).
void check_all_passed(const Json& j) {
  int grads = 0;
  for (const Json& s : j.at("sections"))
    for (const Json& st : s.at("steps"))
      if (st.contains("check")) {
        INFO("gradient ", st.at("id"), ": ", st.at("check").dump());
        CHECK(st.at("check").at("fd_ok") == true);
        CHECK(st.at("check").at("tape_ok") == true);
        CHECK(st.at("check").at("checked").get<int64_t>() > 0);
        ++grads;
      }
  CHECK(grads == 11);
  CHECK(j.at("agreements").size() >= 8);
  for (const Json& a : j.at("agreements")) {
    INFO(a.dump());
    CHECK(a.at("ok") == true);
  }
  CHECK(j.at("failed").empty());
}

Json run_json(const std::string& args, int expected_status = 0) {
  const Run r = walkthrough(args + " --json");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == expected_status);
  return Json::parse(r.out);
}

// A tiny trained translate checkpoint (the reversal task of cli_test_util.hpp).
std::string trained_model(const std::string& name, const std::string& extra) {
  const std::string model = testing::scratch(name);
  const Run r = translate("train --data " + tiny_data() + " --out " + model + " " + kTinyModel +
                          " --steps 40 --lr 3e-3 " + extra);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  return model;
}

}  // namespace

TEST_CASE("cli.walkthrough.numbers_match_the_library") {
  if (!have_walkthrough()) return;
  const Json j = run_json("");
  CHECK(j.at("tokens") == Json({"the", "ball", "is", "blue", "<eos>"}));
  CHECK(j.at("model").at("d_model") == 8);
  CHECK(j.at("model").at("heads") == 2);
  CHECK(j.at("mask") == "causal");
  check_all_passed(j);
  {
    const Mismatches m = mismatches(j);
    CHECK_MESSAGE(m.names == "", m.details);
  }
  // Another shape, no mask, another seed.
  const Json k = run_json("--d-model 12 --heads 3 --mask none --seed 7 --src \"a cat sat on the mat\"");
  CHECK(k.at("tokens").size() == 7);
  check_all_passed(k);
  {
    const Mismatches m = mismatches(k);
    CHECK_MESSAGE(m.names == "", m.details);
  }
}

TEST_CASE("cli.walkthrough.wrong_rules_fail_their_checks") {
  if (!have_walkthrough()) return;
  // The gradients downstream of the wrong rule fail against central differences (not only against
  // the tape); those upstream of it still pass: the checks point at the broken rule.
  struct Case {
    std::string rule;
    std::set<std::string> broken;
    std::string
        differ;  // the printed values the library's own gradients disagree with, in mismatches()'s order
  };
  const std::vector<Case> cases = {
      {"softmax", {"dS", "dQ", "dK", "dW_q", "dW_k"}, "dS dQ dK dW_q dW_k"},
      {"scale", {"dQ", "dK", "dW_q", "dW_k"}, "dQ dK dW_q dW_k"},
      {"transpose", {"dV", "dW_v"}, "dV dW_v"},
  };
  for (const auto& [rule, broken, differ] : cases) {
    INFO("--wrong-rule ", rule);
    const Run r = walkthrough("--json --wrong-rule " + rule);
    CHECK(r.status == 1);
    CHECK(r.err.find("checks failed") != std::string::npos);
    const Json j = Json::parse(r.out);
    std::set<std::string> failed;
    for (const Json& s : j.at("sections"))
      for (const Json& st : s.at("steps"))
        if (st.contains("check")) {
          INFO(st.at("id"), ": ", st.at("check").dump());
          const bool bad = broken.count(st.at("id").get<std::string>()) > 0;
          CHECK(st.at("check").at("fd_ok") == !bad);
          CHECK(st.at("check").at("tape_ok") == !bad);
          if (bad) CHECK(st.at("check").at("fd_max_error").get<double>() > 1e-2);
          if (!st.at("check").at("ok").get<bool>()) failed.insert(st.at("id"));
        }
    CHECK(failed == broken);
    CHECK(j.at("failed").size() == broken.size());  // the engine's own path is not affected
    {
      const Mismatches m = mismatches(j);
      CHECK_MESSAGE(m.names == differ, m.details);
    }  // the comparison with the library is not vacuous either
  }
}

TEST_CASE("cli.walkthrough.text_fits_100_columns_and_is_deterministic") {
  if (!have_walkthrough()) return;
  const Run r = walkthrough("");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  std::istringstream in(r.out);
  size_t lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    INFO("line ", lines + 1, ": ", line);
    CHECK(line.size() < 100);
  }
  CHECK(lines > 100);
  size_t at = 0;
  for (const char* heading : {"1.1 Tokens:",
                              "1.2 Token embeddings:",
                              "1.3 Positions:",
                              "1.4 Embeddings plus positions:",
                              "Q = X W_q^T",
                              "K = X W_k^T",
                              "V = X W_v^T",
                              "Scores:",
                              "Scaled scores:",
                              "Mask:",
                              "Masked scores:",
                              "Attention weights:",
                              "Weighted values:",
                              "Heads concatenated:",
                              "Output projection weights:",
                              "Attention output:",
                              "Residual and layer norm:",
                              "2. Padding: two sentences in one batch",
                              "sentence 2: the ball <eos> <pad> <pad>",
                              "2.3 Its attention weights:",
                              "3. Cross-attention",
                              "3.9 Cross-attention output:",
                              "4. Backward",
                              "dZ = G",
                              "dW_o = dY^T O",
                              "dV_h = P_h^T dO_h",
                              "dP_h = dO_h V_h^T",
                              "J = dP",
                              "dS = P * (dP - rowsum(dP * P))",
                              "dQ_h = dS_h K_h / sqrt(d_k)",
                              "dW_v = dV^T X",
                              "all 22 checks passed"}) {
    INFO("heading ", heading);
    const size_t next = r.out.find(heading, at);
    CHECK(next != std::string::npos);
    if (next != std::string::npos) at = next;
  }
  CHECK(r.out.find("var(S) = ") != std::string::npos);
  CHECK(r.out.find("d_k = 64: var(q.k)") != std::string::npos);
  CHECK(r.out.find("row sums (head 0): 1.0000 1.0000 1.0000 1.0000 1.0000") != std::string::npos);
  CHECK(r.out.find("masked entries exactly 0: yes") != std::string::npos);
  CHECK(r.out.find("FAILED") == std::string::npos);
  CHECK(walkthrough("").out == r.out);  // the same seed, the same numbers
  CHECK(walkthrough("--seed 2").out != r.out);
}

TEST_CASE("cli.walkthrough.page_and_dot_without_graphviz") {
  if (!have_walkthrough()) return;
  const std::string page = testing::scratch("walk.html"), dot = testing::scratch("walk.dot");
  // No dot on the PATH: the page is still complete and says why the graph is not drawn.
  const Run r = walkthrough("--json --html " + page + " --dot " + dot, "PATH=/nonexistent ");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const Json j = Json::parse(r.out);
  const std::string html = testing::read_bytes(page);
  CHECK(html.starts_with("<!DOCTYPE html>"));
  CHECK(html.ends_with("</html>\n"));
  size_t at = 0, panels = 0;
  for (const Json& s : j.at("sections"))
    for (const Json& st : s.at("steps")) {
      INFO("step ", st.at("id"));
      const size_t next = html.find("id=\"step-" + st.at("id").get<std::string>() + "\"", at);
      CHECK(next != std::string::npos);
      if (next != std::string::npos) at = next;
      panels += st.at("matrices").size();
    }
  size_t svgs = 0;
  for (size_t p = 0; (p = html.find("<svg", p)) != std::string::npos; ++p) ++svgs;
  CHECK(svgs == panels);  // one heatmap per matrix, no drawn graph
  CHECK(html.find("dot is not on the PATH") != std::string::npos);
  CHECK(html.find("digraph tape {") != std::string::npos);  // the DOT source instead
  CHECK(html.find("all 22 checks passed") != std::string::npos);
  const std::string dot_text = testing::read_bytes(dot);
  CHECK(dot_text == j.at("tape_dot").get<std::string>());
  CHECK(dot_text.starts_with("digraph tape {"));
  for (const char* node : {"softmax", "matmul", "layernorm", "W_q", "W_o", "X\\n[5, 8]"}) {
    INFO(node);
    CHECK(dot_text.find(node) != std::string::npos);
  }
}

TEST_CASE("cli.walkthrough.graphviz_draws_the_tape") {
  if (!have_walkthrough()) return;
  if (!have_program("dot")) TG_SKIP("Graphviz's dot is not on the PATH (Debian: apt-get install graphviz)");
  const std::string page = testing::scratch("walk_dot.html");
  const Run r = walkthrough("--html " + page);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  const std::string html = testing::read_bytes(page);
  CHECK(html.find("not on the PATH") == std::string::npos);
  CHECK(html.find("<?xml") == std::string::npos);  // inline SVG, no prolog
  // Graphviz's SVG of each tape: its graph group and the op labels.
  size_t graphs = 0;
  for (size_t p = 0; (p = html.find("class=\"graph\"", p)) != std::string::npos; ++p) ++graphs;
  CHECK(graphs == 2);
  CHECK(html.find(">softmax</text>") != std::string::npos);
  CHECK(html.find(">attention</text>") != std::string::npos);  // the engine's one attention op
}

TEST_CASE("cli.walkthrough.trained_checkpoint") {
  if (!have_walkthrough() || !have_cli()) return;
  const std::string model = trained_model("walk.safetensors", "");
  const Json j = run_json("--model " + model + " --src \"a b c\"");
  CHECK(j.at("mask") == "none");  // as the encoder attends
  CHECK(j.at("model").at("trained") == true);
  check_all_passed(j);
  {
    const Mismatches m = mismatches(j);
    CHECK_MESSAGE(m.names == "", m.details);
  }
  // Greedy decoding step by step = translate decode.
  const auto& steps = j.at("greedy").at("steps");
  REQUIRE(!steps.empty());
  CHECK(steps[0].at("prefix") == Json({"<bos>"}));
  CHECK(steps[0].at("top").size() == 3);
  CHECK(j.at("decoder_prefix")[1] == steps[0].at("chosen"));
  const Run d = translate("decode --model " + model, "a b c\n");
  REQUIRE(d.status == 0);
  CHECK(d.out == j.at("greedy").at("translation").get<std::string>() + "\n");
  // The causal mask on request, and a pre-norm model.
  {
    const Mismatches m = mismatches(run_json("--model " + model + " --src \"h g f\" --mask causal"));
    CHECK_MESSAGE(m.names == "", m.details);
  }
  const Json pre =
      run_json("--model " + trained_model("walk_pre.safetensors", "--norm-first") + " --src \"a b\"");
  CHECK(pre.at("model").at("norm_first") == true);
  check_all_passed(pre);
  {
    const Mismatches m = mismatches(pre);
    CHECK_MESSAGE(m.names == "", m.details);
  }
  // The text shows the decoding steps.
  const Run t = walkthrough("--model " + model + " --src \"a b c\"");
  CHECK(t.status == 0);
  CHECK(t.out.find("GREEDY DECODING, STEP BY STEP") != std::string::npos);
  CHECK(t.out.find("translation: " + j.at("greedy").at("translation").get<std::string>()) !=
        std::string::npos);
}

TEST_CASE("cli.walkthrough.errors") {
  if (!have_walkthrough()) return;
  const std::string page = testing::scratch("err.html");
  auto usage = [&](const std::string& args, const std::string& text) {
    INFO(args);
    const Run r = walkthrough(args + " --html " + page);
    INFO("stderr: ", r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(text) != std::string::npos);
    CHECK(r.err.find("usage: attention_walkthrough") != std::string::npos);
    CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
  };
  usage("--heads 3", "--d-model 8 must be divisible by --heads 3");
  usage("--d-model 1", "--d-model: must be in [2, 512], got 1");
  usage("--mask sideways", "--mask: must be one of causal|none");
  usage("--wrong-rule sign", "--wrong-rule: must be one of none|softmax|scale|transpose");
  usage("--src \" \"", "--src is empty");
  usage("--bogus", "unknown option '--bogus'");
  const std::string missing = testing::scratch("missing.safetensors");
  usage("--model " + missing, "--model needs --src");
  usage("--model " + missing + " --src \"a b\" --heads 2", "--d-model and --heads shape the built-in model");

  auto failure = [&](const std::string& args, const std::string& text) {
    INFO(args);
    const Run r = walkthrough(args + " --html " + page);
    INFO("stderr: ", r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(text) != std::string::npos);
    CHECK_MESSAGE(r.written.empty(), "files written: ", join(r.written));
  };
  failure("--model " + missing + " --src \"a b\"", "missing.safetensors");
  const std::string junk = testing::write_bytes("junk.safetensors", "not a safetensors file");
  failure("--model " + junk + " --src \"a b\"", "junk.safetensors");
  const Run r = walkthrough("--html " + testing::scratch("no/such/dir/page.html"));
  CHECK(r.status == 1);
  CHECK(r.err.find("no/such/dir/page.html") != std::string::npos);
  CHECK(r.out.empty());  // the files are written before the report is printed

  const Run help = walkthrough("--help");
  CHECK(help.status == 0);
  CHECK(help.out.find("usage: attention_walkthrough") != std::string::npos);
  CHECK(help.out.find("--wrong-rule") != std::string::npos);
}

TEST_CASE("cli.walkthrough.unknown_word_in_a_checkpoint_vocabulary") {
  if (!have_walkthrough() || !have_cli()) return;
  const std::string model = trained_model("walk_vocab.safetensors", "--steps 1");
  const Run r = walkthrough("--model " + model + " --src \"a zebra b\"");
  INFO("stderr: ", r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("'zebra' not in the source vocabulary of " + model) != std::string::npos);
}
