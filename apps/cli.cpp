// The command-line conventions of apps/cli.hpp on CLI11: the one file that includes the parser.
#include "apps/cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string_view>

#include "ops/kernels.hpp"

namespace tg::cli {

// The CLI11 app behind a Command (cli.hpp keeps it private).
struct Access {
  static CLI::App& app(Command& c) { return *c.app_; }
  static const CLI::App& app(const Command& c) { return *c.app_; }
  static Command& add(Command& parent, CLI::App* sub) {
    parent.commands_.push_back(std::unique_ptr<Command>(new Command()));
    parent.commands_.back()->app_ = sub;
    return *parent.commands_.back();
  }
};

namespace {

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

// "translate train": the program and subcommand names of `app`.
std::string full_name(const CLI::App& app) {
  std::string name = app.get_name();
  for (const CLI::App* p = app.get_parent(); p; p = p->get_parent()) name = p->get_name() + " " + name;
  return name;
}

// The usage line of `app` and how to get its help, for error messages.
std::string usage_line(const CLI::App& app) {
  const std::string name = full_name(app);
  const auto* f = dynamic_cast<const Formatter*>(app.get_formatter().get());
  return fmt::format("usage: {} {}  ({} --help for the options)", name, f ? f->synopsis() : "[options]",
                     name);
}

// "--steps 3" after "--lr": CLI11 takes the next word as the value; the old parsers, and users,
// expect that to be an error.
std::string looks_like_option(const std::string& v) {
  return v.size() > 2 && v.starts_with("--") ? fmt::format("needs a value, got the option '{}'", v) : "";
}

// CLI11's texts for a missing value and for a value given to a flag, in the words of the others.
std::string mismatch_message(const std::string& what) {
  const std::string missing = " missing", flag = " was given a disallowed flag override";
  if (const size_t at = what.find(": 1 required "); at != std::string::npos && what.ends_with(missing))
    return fmt::format("{}: needs a value ({})", what.substr(0, at),
                       what.substr(at + 13, what.size() - at - 13 - missing.size()));
  if (what.ends_with(flag))
    return fmt::format("--{}: takes no value", what.substr(0, what.size() - flag.size()));
  return what;
}

std::string interval(double min, double max, bool min_open) {
  if (max == kNoMaxReal) return fmt::format("{} {}", min_open ? ">" : ">=", min);
  return fmt::format("in {}{}, {}]", min_open ? "(" : "[", min, max);
}

std::string int_interval(int64_t min, int64_t max) {
  return max == kNoMax ? fmt::format(">= {}", min) : fmt::format("{}..{}", min, max);
}

CLI::Validator to_cli(Validator v) {
  return CLI::Validator([v = std::move(v)](std::string& s) { return v(s); }, "");
}

template <class Int>
Option add_int_impl(Command& app, const std::string& name, Int& var, const std::string& help, int64_t min,
                    int64_t max, const std::string& metavar) {
  return Option(Access::app(app)
                    .add_option(name, var, help + ", " + int_interval(min, max))
                    ->type_name(metavar)
                    ->check(to_cli(int_range(min, max)))
                    ->capture_default_str());
}

template <class Int>
Option add_optional_int_impl(Command& app, const std::string& name, std::optional<Int>& var,
                             const std::string& help, int64_t min, int64_t max, const std::string& metavar,
                             const std::string& default_text) {
  return Option(Access::app(app)
                    .add_option_function<Int>(
                        name, [&var](const Int& x) { var = x; }, help + ", " + int_interval(min, max))
                    ->type_name(metavar)
                    ->check(to_cli(int_range(min, max)))
                    ->default_str(default_text));
}

template <class T>
Option add_list_impl(Command& app, const std::string& name, std::vector<T>& var, const std::string& help) {
  return Option(Access::app(app).add_option(name, var, help)->type_name("LIST")->delimiter(','));
}

// The deepest subcommand that was selected (the one whose options were being parsed).
const CLI::App& selected(const CLI::App& app) {
  const CLI::App* a = &app;
  while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
  return *a;
}

// Prints "<program>: error: <message>" and the usage line on stderr; returns kUsage.
int usage_error(const CLI::App& app, const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "{}: error: {}\n{}\n", full_name(app), message, usage_line(app));
  return kUsage;
}

}  // namespace

// ---- Option, Command, Program

Option& Option::required() {
  o_->required();
  return *this;
}
Option& Option::excludes(const Option& other) {
  o_->excludes(other.o_);
  return *this;
}
Option& Option::excludes(const std::string& name) {
  o_->excludes(name);
  return *this;
}
Option& Option::check(Validator v) {
  o_->check(to_cli(std::move(v)));
  return *this;
}
Option& Option::type_name(const std::string& metavar) {
  o_->type_name(metavar);
  return *this;
}
Option& Option::default_str(const std::string& text) {
  o_->default_str(text);
  return *this;
}
Option& Option::capture_default_str() {
  o_->capture_default_str();
  return *this;
}
Option& Option::each(std::function<void(const std::string&)> f) {
  o_->each(std::move(f));
  return *this;
}
size_t Option::count() const {
  return o_->count();
}

Command::~Command() = default;
bool Command::parsed() const {
  return app_->parsed();
}
void Command::footer(const std::string& text) {
  app_->footer(text);
}
void Command::callback(std::function<void()> f) {
  app_->callback(std::move(f));
}

Program::Program(const std::string& description, const std::string& name)
    : owned_(std::make_unique<CLI::App>(description, name)) {
  app_ = owned_.get();
}
Program::~Program() = default;  // here, where CLI::App is a complete type

void style(Command& command, const std::string& synopsis, const std::string& details) {
  CLI::App& app = Access::app(command);
  app.formatter(std::make_shared<Formatter>(synopsis, details));
  app.option_defaults()->group("options")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "this message")->group("options");
  app.group("commands");
}

Command* add_command(Command& app, const std::string& name, const std::string& summary,
                     const std::string& synopsis, const std::string& details) {
  Command& c = Access::add(app, Access::app(app).add_subcommand(name, summary));
  style(c, synopsis, details);
  return &c;
}

// ---- validators

Validator int_range(int64_t min, int64_t max) {
  return [min, max](const std::string& v) -> std::string {
    if (std::string e = looks_like_option(v); !e.empty()) return e;
    int64_t x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      return fmt::format("expects an integer, got '{}'", v);
    if (x < min || x > max)
      return max == kNoMax ? fmt::format("must be >= {}, got {}", min, x)
                           : fmt::format("must be in [{}, {}], got {}", min, max, x);
    return "";
  };
}

Validator real_range(double min, double max, bool min_open) {
  return [min, max, min_open](const std::string& v) -> std::string {
    if (std::string e = looks_like_option(v); !e.empty()) return e;
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(x) || errno == ERANGE)
      return fmt::format("expects a number, got '{}'", v);
    if (x < min || x > max || (min_open && x == min))
      return fmt::format("must be {}, got {}", interval(min, max, min_open), v);
    return "";
  };
}

Validator one_of(std::vector<std::string> choices) {
  return [choices = std::move(choices)](const std::string& v) -> std::string {
    for (const auto& c : choices)
      if (c == v) return "";
    return fmt::format("must be one of {}, got '{}'", fmt::join(choices, "|"), v);
  };
}

Validator text() {
  return [](const std::string& v) { return looks_like_option(v); };
}

// ---- options

Option add_int(Command& app, const std::string& name, int64_t& var, const std::string& help, int64_t min,
               int64_t max, const std::string& metavar) {
  return add_int_impl(app, name, var, help, min, max, metavar);
}
Option add_int(Command& app, const std::string& name, int& var, const std::string& help, int64_t min,
               int64_t max, const std::string& metavar) {
  return add_int_impl(app, name, var, help, min, max, metavar);
}
Option add_int(Command& app, const std::string& name, uint64_t& var, const std::string& help, int64_t min,
               int64_t max, const std::string& metavar) {
  return add_int_impl(app, name, var, help, min, max, metavar);
}

Option add_real(Command& app, const std::string& name, double& var, const std::string& help, double min,
                double max, bool min_open, const std::string& metavar) {
  return Option(Access::app(app)
                    .add_option(name, var, help + ", " + interval(min, max, min_open))
                    ->type_name(metavar)
                    ->check(to_cli(real_range(min, max, min_open)))
                    ->default_str(fmt::format("{}", var)));
}

Option add_choice(Command& app, const std::string& name, std::string& var, const std::string& help,
                  const std::vector<std::string>& choices) {
  return Option(Access::app(app)
                    .add_option(name, var, help)
                    ->type_name(fmt::format("{}", fmt::join(choices, "|")))
                    ->check(to_cli(one_of(choices)))
                    ->capture_default_str());
}

Option add_optional_int(Command& app, const std::string& name, std::optional<int64_t>& var,
                        const std::string& help, int64_t min, int64_t max, const std::string& metavar,
                        const std::string& default_text) {
  return add_optional_int_impl(app, name, var, help, min, max, metavar, default_text);
}
Option add_optional_int(Command& app, const std::string& name, std::optional<int>& var,
                        const std::string& help, int64_t min, int64_t max, const std::string& metavar,
                        const std::string& default_text) {
  return add_optional_int_impl(app, name, var, help, min, max, metavar, default_text);
}

Option add_optional_real(Command& app, const std::string& name, std::optional<double>& var,
                         const std::string& help, double min, double max, const std::string& metavar,
                         const std::string& default_text) {
  return Option(Access::app(app)
                    .add_option_function<double>(
                        name, [&var](const double& x) { var = x; }, help + ", " + interval(min, max, false))
                    ->type_name(metavar)
                    ->check(to_cli(real_range(min, max)))
                    ->default_str(default_text));
}

Option add_text(Command& app, const std::string& name, std::string& var, const std::string& help,
                const std::string& metavar) {
  return Option(Access::app(app).add_option(name, var, help)->type_name(metavar)->check(to_cli(text())));
}

Option add_flag(Command& app, const std::string& name, bool& var, const std::string& help) {
  return Option(Access::app(app).add_flag(name, var, help)->disable_flag_override());
}

Option add_list(Command& app, const std::string& name, std::vector<std::string>& var,
                const std::string& help) {
  return add_list_impl(app, name, var, help);
}
Option add_list(Command& app, const std::string& name, std::vector<int>& var, const std::string& help) {
  return add_list_impl(app, name, var, help);
}
Option add_list(Command& app, const std::string& name, std::vector<int64_t>& var, const std::string& help) {
  return add_list_impl(app, name, var, help);
}

Option add_positional(Command& app, const std::string& name, std::vector<std::string>& var,
                      const std::string& help) {
  return Option(Access::app(app).add_option(name, var, help)->check(to_cli(text())));
}

Option add_option(Command& app, const std::string& name, int64_t& var, const std::string& help) {
  return Option(Access::app(app).add_option(name, var, help));
}
Option add_option(Command& app, const std::string& name, std::string& var, const std::string& help) {
  return Option(Access::app(app).add_option(name, var, help));
}

Option add_threads(Command& app, std::optional<int>& threads, const std::string& help_default) {
  return add_optional_int(app, "--threads", threads, "kernel threads", 1, 1024, "N", help_default)
      .each([](const std::string& n) { ops::set_num_threads(std::stoi(n)); });
}

Option add_precision(Command& app, Precision& var) {
  return Option(Access::app(app)
                    .add_option_function<std::string>(
                        "--precision", [&var](const std::string& s) { var = parse_precision(s); },
                        "precision of the matrix products: bf16 rounds their operands to bf16 (fp32 sums; "
                        "fp32 products where the CPU has no bf16 dot unit faster than its fp32 FMAs); "
                        "weights, gradients, softmax, norms, losses and checkpoints stay fp32")
                    ->type_name("fp32|bf16")
                    ->check(to_cli(one_of({"fp32", "bf16"})))
                    ->default_str(precision_name(var)));
}

// ---- training options kept in a checkpoint

std::set<std::string> given_options(const Command& command) {
  std::set<std::string> given;
  for (const CLI::Option* o : Access::app(command).get_options())
    if (o->count() > 0) given.insert(o->get_single_name());
  return given;
}

std::map<std::string, std::string> option_values(const Command& command,
                                                 const std::vector<std::string>& names,
                                                 const std::string& prefix,
                                                 const std::set<std::string>& only_if_given) {
  std::map<std::string, std::string> m;
  for (const std::string& name : names) {
    const CLI::Option* o = Access::app(command).get_option("--" + name);
    const bool given = o->count() > 0;
    const std::string v = given ? o->results().back() : o->get_default_str();
    if (!v.empty() && (given || !only_if_given.contains(name))) m[prefix + name] = v;
  }
  return m;
}

void reuse_option_values(Command& command, const std::vector<std::string>& names,
                         const std::map<std::string, std::string>& saved, const std::string& prefix,
                         const std::string& path) {
  for (const std::string& name : names) {
    CLI::Option* o = Access::app(command).get_option("--" + name);
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

// ---- running a program

namespace {
// OMP_NUM_THREADS is read by the OpenMP runtime, which ignores a value it cannot parse (and then runs
// on every core) and takes any count (99999 threads), and by the programs' defaults ("1 thread
// unless OMP_NUM_THREADS says otherwise"). A value that is not a whole number from 1 to 1024, the
// range of --threads, is refused by name. libgomp also takes a list of counts per nesting level
// ("4,2"): its first is the one that counts here.
void check_omp_num_threads() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) return;
  std::string_view s(value);
  s = s.substr(0, s.find(','));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty() && std::string_view(value).find(',') == std::string_view::npos) return;  // empty: unset
  int n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n < 1 || n > 1024)
    throw UsageError(fmt::format(
        "OMP_NUM_THREADS={:?} is not a whole number from 1 to 1024 (the kernel threads): unset it or give "
        "a count",
        std::string_view(value)));
}
}  // namespace

int run(Program& program, int argc, char** argv, const std::function<int()>& body) {
  CLI::App& app = Access::app(program);
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
    return usage_error(selected(app), mismatch_message(e.what()));
  } catch (const CLI::ParseError& e) {
    return usage_error(selected(app), e.what());
  }
  const CLI::App& command = selected(app);
  try {
    check_omp_num_threads();
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

int run_commands(Program& app, int argc, char** argv,
                 const std::vector<std::pair<const Command*, std::function<int()>>>& commands) {
  return run(app, argc, argv, [&] {
    for (const auto& [command, body] : commands)
      if (command->parsed()) return body();
    throw UsageError("no command given");
  });
}

}  // namespace tg::cli
