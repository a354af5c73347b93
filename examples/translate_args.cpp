#include "translate_args.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace translate {

Args::Args(std::string command, std::string synopsis, std::string description)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), description_(std::move(description)) {}

Args& Args::option(const std::string& name, const std::string& metavar, const std::string& help,
                   const std::string& default_value) {
  specs_.push_back({name, metavar, help, default_value, false});
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  specs_.push_back({name, "", help, "", true});
  return *this;
}

void Args::set_default(const std::string& name, const std::string& value) {
  for (Spec& s : specs_)
    if (s.name == name) s.default_value = value;
  spec(name);
}

const Args::Spec& Args::spec(const std::string& name) const {
  for (const Spec& s : specs_)
    if (s.name == name) return s;
  throw std::logic_error("translate: option --" + name + " was never declared");
}

bool Args::parse(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (!a.starts_with("--")) throw error(fmt::format("unexpected argument '{}'", a));
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      inline_value = true;
    }
    const Spec* s = nullptr;
    for (const Spec& x : specs_)
      if (x.name == name) s = &x;
    if (!s) throw error(fmt::format("unknown option '--{}'", name));
    if (s->is_flag) {
      if (inline_value) throw error(fmt::format("option '--{}' takes no value", name));
      values_.insert_or_assign(name, std::string(1, '1'));
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size() || (argv[i + 1].starts_with("--") && argv[i + 1].size() > 2))
        throw error(fmt::format("option '--{}' needs a value ({})", name, s->metavar));
      value = argv[++i];
    }
    values_[name] = value;
  }
  return true;
}

bool Args::given(const std::string& name) const {
  spec(name);
  return values_.contains(name);
}
bool Args::has(const std::string& name) const {
  return given(name) || !spec(name).default_value.empty();
}
bool Args::flag_set(const std::string& name) const {
  return given(name) || spec(name).default_value == "1";
}

std::string Args::str(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  const Spec& s = spec(name);
  if (s.default_value.empty()) throw error(fmt::format("missing required option '--{} {}'", name, s.metavar));
  return s.default_value;
}

int64_t Args::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE)
    throw error(fmt::format("option '--{}' expects an integer, got '{}'", name, v));
  if (x < min || x > max)
    throw error(max == INT64_MAX
                    ? fmt::format("option '--{}' must be >= {}, got {}", name, min, x)
                    : fmt::format("option '--{}' must be in [{}, {}], got {}", name, min, max, x));
  return x;
}

double Args::real(const std::string& name, double min, double max, bool min_inclusive) const {
  const std::string v = str(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x))
    throw error(fmt::format("option '--{}' expects a number, got '{}'", name, v));
  if (x < min || x > max || (!min_inclusive && x == min))
    throw error(fmt::format("option '--{}' must be in {}{}, {}], got {}", name, min_inclusive ? "[" : "(",
                            min, max, v));
  return x;
}

std::string Args::choice(const std::string& name, const std::vector<std::string>& allowed) const {
  const std::string v = str(name);
  for (const auto& a : allowed)
    if (a == v) return v;
  throw error(fmt::format("option '--{}' must be one of {}, got '{}'", name, fmt::join(allowed, "|"), v));
}

std::string Args::usage() const {
  return fmt::format("usage: translate {} {}  (translate {} --help for the options)", command_, synopsis_,
                     command_);
}

std::string Args::help() const {
  std::string out =
      fmt::format("usage: translate {} {}\n\n{}\n\noptions:\n", command_, synopsis_, description_);
  for (const Spec& s : specs_) {
    std::string left =
        s.is_flag ? fmt::format("  --{}", s.name) : fmt::format("  --{} {}", s.name, s.metavar);
    if (left.size() < 26)
      left.resize(26, ' ');
    else
      left.append("\n").append(26, ' ');
    out += left + s.help;
    if (!s.default_value.empty()) out += fmt::format(" (default {})", s.default_value);
    out += "\n";
  }
  return out + "  --help                  this message\n";
}

}  // namespace translate
