// The command-line conventions of the tapegrad programs (translate, copy_task, bench_train,
// bench_mpi), on CLI11: each option is declared once, with its help text, range and default; --help
// is generated from those declarations; a bad command line ends with a message naming the option,
// the usage line and exit status 2.
//
//   CLI::App app("Trains a small Transformer to copy sequences.", "copy_task");
//   tg::cli::style(app, "[options]");
//   int64_t steps = 300;
//   tg::cli::add_int(app, "--steps", steps, "training steps", 1);          // 1 .. INT64_MAX
//   double lr = 1e-3;
//   tg::cli::add_real(app, "--lr", lr, "peak learning rate", 0, 10, tg::cli::kOpenMin);
//   std::optional<int> threads;
//   tg::cli::add_threads(app, threads);
//   return tg::cli::run(app, argc, argv, [&] { tg::cli::apply_threads(threads); ...; return 0; });
//
// Values: "--opt value" and "--opt=value"; an option given twice keeps the last value. A flag
// takes no value ("--json", never "--json=1"). A value that looks like an option ("--lr --steps 3")
// is reported as a missing value.
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/precision.hpp"
#include "examples/cli_errors.hpp"
#include "ops/kernels.hpp"

namespace tg::cli {

// Help layout: "usage: <program> <synopsis>", the description, then one line per option:
// "--name METAVAR   help, range (default X)". A subcommand's long description (`details`) is
// printed in its own help; the parent's list of commands shows its one-line description.
class Formatter : public CLI::Formatter {
 public:
  Formatter(std::string synopsis, std::string details)
      : synopsis_(std::move(synopsis)), details_(std::move(details)) {
    column_width(26);
  }
  const std::string& synopsis() const { return synopsis_; }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, name) + "\n";
    const std::string& description = details_.empty() ? app->get_description() : details_;
    if (!description.empty()) out += description + "\n";
    out += make_groups(app, mode) + make_subcommands(app, mode);
    if (!app->get_footer().empty()) out += "\n" + app->get_footer() + "\n";
    return out;
  }
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "usage: " + name + " " + synopsis_ + "\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool) const override {
    std::string names;
    for (const std::string& n : opt->get_snames()) names += (names.empty() ? "-" : ", -") + n;
    for (const std::string& n : opt->get_lnames()) names += (names.empty() ? "--" : ", --") + n;
    return names;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_type_size() != 0 ? " " + opt->get_type_name() : "";
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string d = opt->get_description();
    if (opt->get_required()) d += " (required)";
    if (!opt->get_default_str().empty()) d += " (default " + opt->get_default_str() + ")";
    return d;
  }

 private:
  std::string synopsis_, details_;
};

// Gives `app` the house help layout, with `synopsis` after the program name in the usage line and
// `details` (if any) instead of the one-line description in its help. Call before adding options
// (their group is "options"; subcommands are listed as "commands").
inline CLI::App& style(CLI::App& app, const std::string& synopsis, const std::string& details = "") {
  app.formatter(std::make_shared<Formatter>(synopsis, details));
  app.option_defaults()->group("options")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this message")->group("options");
  app.group("commands");
  return app;
}

// A subcommand `name` of `app` in the same style: `summary` in the parent's list of commands,
// `details` in its own help.
inline CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& summary,
                             const std::string& synopsis, const std::string& details) {
  CLI::App* c = app.add_subcommand(name, summary);
  style(*c, synopsis, details);
  return c;
}

// "translate train": the program and subcommand names of `app`.
inline std::string full_name(const CLI::App& app) {
  std::string name = app.get_name();
  for (const CLI::App* p = app.get_parent(); p; p = p->get_parent()) name = p->get_name() + " " + name;
  return name;
}

// The usage line of `app` and how to get its help, for error messages.
inline std::string usage_line(const CLI::App& app) {
  const std::string name = full_name(app);
  const auto* f = dynamic_cast<const Formatter*>(app.get_formatter().get());
  return fmt::format("usage: {} {}  ({} --help for the options)", name, f ? f->synopsis() : "[options]",
                     name);
}

// ---- validators: each names what it expects and what it got ("--threads: must be in [1, 1024], got 0")

namespace detail {

// "--steps 3" after "--lr": CLI11 takes the next word as the value; the old parsers, and users,
// expect that to be an error.
inline std::string looks_like_option(const std::string& v) {
  return v.size() > 2 && v.starts_with("--") ? fmt::format("needs a value, got the option '{}'", v) : "";
}

// CLI11's texts for a missing value and for a value given to a flag, in the words of the others.
inline std::string mismatch_message(const std::string& what) {
  const std::string missing = " missing", flag = " was given a disallowed flag override";
  if (const size_t at = what.find(": 1 required "); at != std::string::npos && what.ends_with(missing))
    return fmt::format("{}: needs a value ({})", what.substr(0, at),
                       what.substr(at + 13, what.size() - at - 13 - missing.size()));
  if (what.ends_with(flag))
    return fmt::format("--{}: takes no value", what.substr(0, what.size() - flag.size()));
  return what;
}

inline std::string interval(double min, double max, bool min_open) {
  if (max == std::numeric_limits<double>::max()) return fmt::format("{} {}", min_open ? ">" : ">=", min);
  return fmt::format("in {}{}, {}]", min_open ? "(" : "[", min, max);
}

}  // namespace detail

inline constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
inline constexpr double kNoMaxReal = std::numeric_limits<double>::max();
inline constexpr bool kOpenMin = true;

// An integer in [min, max].
inline CLI::Validator int_range(int64_t min, int64_t max = kNoMax) {
  return CLI::Validator(
      [min, max](std::string& v) -> std::string {
        if (std::string e = detail::looks_like_option(v); !e.empty()) return e;
        int64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (v.empty() || ec != std::errc() || end != v.data() + v.size())
          return fmt::format("expects an integer, got '{}'", v);
        if (x < min || x > max)
          return max == kNoMax ? fmt::format("must be >= {}, got {}", min, x)
                               : fmt::format("must be in [{}, {}], got {}", min, max, x);
        return "";
      },
      "");
}

// A finite number in [min, max] ((min, max] with kOpenMin).
inline CLI::Validator real_range(double min, double max, bool min_open = false) {
  return CLI::Validator(
      [min, max, min_open](std::string& v) -> std::string {
        if (std::string e = detail::looks_like_option(v); !e.empty()) return e;
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !std::isfinite(x) || errno == ERANGE)
          return fmt::format("expects a number, got '{}'", v);
        if (x < min || x > max || (min_open && x == min))
          return fmt::format("must be {}, got {}", detail::interval(min, max, min_open), v);
        return "";
      },
      "");
}

// One of `choices`.
inline CLI::Validator one_of(std::vector<std::string> choices) {
  return CLI::Validator(
      [choices](std::string& v) -> std::string {
        for (const auto& c : choices)
          if (c == v) return "";
        return fmt::format("must be one of {}, got '{}'", fmt::join(choices, "|"), v);
      },
      "");
}

// Any text but an option name (a file, a sentence).
inline CLI::Validator text() {
  return CLI::Validator([](std::string& v) { return detail::looks_like_option(v); }, "");
}

// ---- options: the range goes into the help text, the variable's value is the default shown

template <class Int>
CLI::Option* add_int(CLI::App& app, const std::string& name, Int& var, const std::string& help, int64_t min,
                     int64_t max = kNoMax, const std::string& metavar = "N") {
  const std::string range = max == kNoMax ? fmt::format(">= {}", min) : fmt::format("{}..{}", min, max);
  return app.add_option(name, var, help + ", " + range)
      ->type_name(metavar)
      ->check(int_range(min, max))
      ->capture_default_str();
}

inline CLI::Option* add_real(CLI::App& app, const std::string& name, double& var, const std::string& help,
                             double min, double max, bool min_open = false,
                             const std::string& metavar = "X") {
  return app.add_option(name, var, help + ", " + detail::interval(min, max, min_open))
      ->type_name(metavar)
      ->check(real_range(min, max, min_open))
      ->default_str(fmt::format("{}", var));
}

inline CLI::Option* add_choice(CLI::App& app, const std::string& name, std::string& var,
                               const std::string& help, const std::vector<std::string>& choices) {
  return app.add_option(name, var, help)
      ->type_name(fmt::format("{}", fmt::join(choices, "|")))
      ->check(one_of(choices))
      ->capture_default_str();
}

// An option without a default: `var` stays empty unless given. `default_text` says in the help
// what holds then ("adamw: 0.01, else 0").
template <class Int>
CLI::Option* add_optional_int(CLI::App& app, const std::string& name, std::optional<Int>& var,
                              const std::string& help, int64_t min, int64_t max = kNoMax,
                              const std::string& metavar = "N", const std::string& default_text = "") {
  const std::string range = max == kNoMax ? fmt::format(">= {}", min) : fmt::format("{}..{}", min, max);
  return app
      .add_option_function<Int>(
          name, [&var](const Int& x) { var = x; }, help + ", " + range)
      ->type_name(metavar)
      ->check(int_range(min, max))
      ->default_str(default_text);
}

inline CLI::Option* add_optional_real(CLI::App& app, const std::string& name, std::optional<double>& var,
                                      const std::string& help, double min, double max,
                                      const std::string& metavar = "X",
                                      const std::string& default_text = "") {
  return app
      .add_option_function<double>(
          name, [&var](const double& x) { var = x; }, help + ", " + detail::interval(min, max, false))
      ->type_name(metavar)
      ->check(real_range(min, max))
      ->default_str(default_text);
}

// A file name or other text; required unless `var` has a default or the caller says otherwise.
inline CLI::Option* add_text(CLI::App& app, const std::string& name, std::string& var,
                             const std::string& help, const std::string& metavar = "FILE") {
  return app.add_option(name, var, help)->type_name(metavar)->check(text());
}

inline CLI::Option* add_flag(CLI::App& app, const std::string& name, bool& var, const std::string& help) {
  return app.add_flag(name, var, help)->disable_flag_override();
}

// --threads N (1..1024): the number of kernel threads, set as soon as the option is parsed
// (ops::set_num_threads); not given, `threads` stays empty and the caller's default holds (say
// which in `help_default`).
inline CLI::Option* add_threads(CLI::App& app, std::optional<int>& threads,
                                const std::string& help_default = "all cores") {
  return add_optional_int(app, "--threads", threads, "kernel threads", 1, 1024, "N", help_default)
      ->each([](const std::string& n) { ops::set_num_threads(std::stoi(n)); });
}

// ---- training options kept in a checkpoint (metadata "<prefix><name>") and reused by --resume

// The options a (sub)command's command line set, by name without the dashes (after parsing: in the
// command's callback). --resume reuses the saved value of every training option not among them.
inline std::set<std::string> given_options(const CLI::App& command) {
  std::set<std::string> given;
  for (const CLI::Option* o : command.get_options())
    if (o->count() > 0) given.insert(o->get_single_name());
  return given;
}

// The options `names` (without the dashes) of `command` as metadata: the value given on the command
// line, else the default. An option in `only_if_given` (whose default is a description such as
// "adamw 0.01, else 0", not a value) is left out unless given.
inline std::map<std::string, std::string> option_values(const CLI::App& command,
                                                        const std::vector<std::string>& names,
                                                        const std::string& prefix,
                                                        const std::set<std::string>& only_if_given = {}) {
  std::map<std::string, std::string> m;
  for (const std::string& name : names) {
    const CLI::Option* o = command.get_option("--" + name);
    const bool given = o->count() > 0;
    const std::string v = given ? o->results().back() : o->get_default_str();
    if (!v.empty() && (given || !only_if_given.contains(name))) m[prefix + name] = v;
  }
  return m;
}

// --resume: every option of `names` that the command line did not give takes its value from
// `saved` ("<prefix><name>", when present), checked as the command line's would be; a bad value
// throws std::runtime_error naming `path` and the key.
inline void reuse_option_values(CLI::App& command, const std::vector<std::string>& names,
                                const std::map<std::string, std::string>& saved, const std::string& prefix,
                                const std::string& path) {
  for (const std::string& name : names) {
    CLI::Option* o = command.get_option("--" + name);
    const auto it = saved.find(prefix + name);
    if (o->count() > 0 || it == saved.end()) continue;
    try {
      o->clear();
      o->add_result(it->second);
      o->run_callback();
    } catch (const CLI::Error& e) {
      throw std::runtime_error(fmt::format("{}: saved training option {}: {}", path, it->first, e.what()));
    }
  }
}

// --precision fp32|bf16: the precision of the matrix products (autograd/precision.hpp), stored in
// `var` as it is parsed; its value when called is the default shown.
inline CLI::Option* add_precision(CLI::App& app, Precision& var) {
  return app
      .add_option_function<std::string>(
          "--precision", [&var](const std::string& s) { var = parse_precision(s); },
          "precision of the matrix products: bf16 rounds their operands to bf16 (fp32 sums; fp32 "
          "products where the CPU has no bf16 dot unit faster than its fp32 FMAs); weights, gradients, "
          "softmax, norms, losses "
          "and checkpoints stay fp32")
      ->type_name("fp32|bf16")
      ->check(one_of({"fp32", "bf16"}))
      ->default_str(precision_name(var));
}

// ---- running a program

// The deepest subcommand that was selected (the one whose options were being parsed).
inline const CLI::App& selected(const CLI::App& app) {
  const CLI::App* a = &app;
  while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
  return *a;
}

// Prints "<program>: error: <message>" and the usage line on stderr; returns kUsage.
inline int usage_error(const CLI::App& app, const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\n{}\n", full_name(app), message, usage_line(app));
  return kUsage;
}

// Parses the command line with `app`, then returns body()'s exit status. --help prints the help of
// the command it follows and returns kSuccess. A bad command line (CLI11's parse errors, UsageError
// from body) prints the message and the usage line and returns kUsage; any other exception from
// body prints "<program>: error: <what>" (std::bad_alloc: "out of memory") and returns kFailure.
inline int run(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    const CLI::App& sub = selected(app);
    fmt::print("{}", sub.help(sub.get_parent() ? full_name(*sub.get_parent()) : ""));
    return kSuccess;
  } catch (const CLI::ExtrasError&) {
    const CLI::App& sub = selected(app);
    const std::vector<std::string> rest = sub.remaining();
    const std::string first = rest.empty() ? "" : rest.front();
    if (&sub == &app && !app.get_subcommands({}).empty() && !first.starts_with("-"))
      return usage_error(sub, fmt::format("unknown command '{}'", first));
    return usage_error(
        sub,
        fmt::format("{} '{}'", first.starts_with("-") ? "unknown option" : "unexpected argument", first));
  } catch (const CLI::ArgumentMismatch& e) {
    return usage_error(selected(app), detail::mismatch_message(e.what()));
  } catch (const CLI::ParseError& e) {
    return usage_error(selected(app), e.what());
  }
  const CLI::App& command = selected(app);
  try {
    return body();
  } catch (const UsageError& e) {
    return usage_error(command, e.what());
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: error: out of memory (a model, batch or file too large for the memory left)\n",
               full_name(command));
    return kFailure;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: error: {}\n", full_name(command), e.what());
    return kFailure;
  }
}

// run() for a program of subcommands: `commands` pairs each subcommand with what runs it; a
// command line naming none is a usage error.
inline int run_commands(CLI::App& app, int argc, char** argv,
                        const std::vector<std::pair<const CLI::App*, std::function<int()>>>& commands) {
  return run(app, argc, argv, [&] {
    for (const auto& [command, body] : commands)
      if (command->parsed()) return body();
    throw UsageError("no command given");
  });
}

}  // namespace tg::cli
