// Times llm.c's CPU training step (train_gpt2.c: gpt2_forward, gpt2_zero_grad, gpt2_backward,
// gpt2_update, as its main loop calls them) on GPT-2 124M's shape with random weights and tokens,
// for bench_lm's gpt2 configs. Not part of the meson build: tools/bench_llmc.sh compiles it against
// an llm.c checkout the way llm.c's Makefile builds train_gpt2 (-Ofast -march=native -fopenmp),
// with TESTING defined so that train_gpt2.c leaves out its main (as llm.c's test_gpt2.c does).
//
//   llmc_step B T STEPS WARMUP      prints one line per step and a JSON line with the median
//
// The model file it writes (llmc_gpt2_124M_random.bin in the working directory) is llm.c's
// version-3 fp32 checkpoint: a 256-int header (magic 20240326, version 3, max_seq_len, vocab_size,
// num_layers, num_heads, channels, padded_vocab_size), then the 16 parameter tensors in llm.c's
// order: N(0, 0.02) matrices and embeddings, layernorm weights 1, biases 0.
#define TESTING
#include "train_gpt2.c"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double uniform01(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return ((rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

static float normal(float stddev) {  // Box-Muller
  const double u = uniform01() + 1e-300, v = uniform01();
  return (float)(stddev * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void write_model(const char* path, GPT2Config c) {
  size_t sizes[NUM_PARAMETER_TENSORS];
  fill_in_parameter_sizes(sizes, c);
  int header[256] = {0};
  header[0] = 20240326, header[1] = 3, header[2] = c.max_seq_len, header[3] = c.vocab_size;
  header[4] = c.num_layers, header[5] = c.num_heads, header[6] = c.channels, header[7] = c.padded_vocab_size;
  FILE* f = fopenCheck(path, "wb");
  fwrite(header, sizeof(int), 256, f);
  for (int i = 0; i < NUM_PARAMETER_TENSORS; ++i) {
    // 2, 8, 14: layernorm weights; 3, 5, 7, 9, 11, 13, 15: biases (layernorm ones among them)
    const int ln_weight = i == 2 || i == 8 || i == 14,
              bias = i == 3 || i == 5 || i == 7 || i == 9 || i == 11 || i == 13 || i == 15;
    float* v = (float*)mallocCheck(sizes[i] * sizeof(float));
    for (size_t j = 0; j < sizes[i]; ++j) v[j] = ln_weight ? 1.0f : bias ? 0.0f : normal(0.02f);
    if (fwrite(v, sizeof(float), sizes[i], f) != sizes[i]) {
      fprintf(stderr, "llmc_step: cannot write %s\n", path);
      exit(1);
    }
    free(v);
  }
  fcloseCheck(f);
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: llmc_step B T STEPS WARMUP\n");
    return 2;
  }
  const int B = atoi(argv[1]), T = atoi(argv[2]), steps = atoi(argv[3]), warmup = atoi(argv[4]);
  if (B <= 0 || T <= 0 || T > 1024 || steps <= 0 || warmup < 0) {
    fprintf(stderr, "llmc_step: need B > 0, 0 < T <= 1024, STEPS > 0, WARMUP >= 0\n");
    return 2;
  }
  const GPT2Config c = {.max_seq_len = 1024,
                        .vocab_size = 50257,
                        .padded_vocab_size = 50304,
                        .num_layers = 12,
                        .num_heads = 12,
                        .channels = 768};
  const char* path = "llmc_gpt2_124M_random.bin";
  write_model(path, c);
  GPT2 model;
  gpt2_build_from_checkpoint(&model, path);
  int* tokens = (int*)mallocCheck((size_t)(B * T + 1) * sizeof(int));
  double* ms = (double*)mallocCheck((size_t)steps * sizeof(double));
  for (int s = 0; s < warmup + steps; ++s) {
    for (int i = 0; i < B * T + 1; ++i) tokens[i] = (int)(uniform01() * c.vocab_size);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gpt2_forward(&model, tokens, tokens + 1, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s + 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double t = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("step %d%s: loss %f, %.1f ms\n", s, s < warmup ? " (warm-up)" : "", model.mean_loss, t);
    fflush(stdout);
    if (s >= warmup) ms[s - warmup] = t;
  }
  qsort(ms, (size_t)steps, sizeof(double), by_value);
  const double median = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
  printf(
      "{\"impl\": \"llm.c\", \"B\": %d, \"T\": %d, \"steps\": %d, \"ms_per_step\": %.1f, \"ms_min\": %.1f, "
      "\"ms_max\": %.1f}\n",
      B, T, steps, median, ms[0], ms[steps - 1]);
  gpt2_free(&model);
  free(tokens);
  free(ms);
  remove(path);
  return 0;
}
