#include "io/file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace tg::io {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(fmt::format("{}: is a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  if (!std::filesystem::is_regular_file(path, ec)) {  // a pipe or a device: read until its end
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", path));
    return bytes;
  }
  // One allocation of the file's size (growing a string while reading needs up to twice that).
  const auto size = static_cast<std::streamsize>(std::filesystem::file_size(path, ec));
  if (ec) throw std::runtime_error(fmt::format("{}: read error: {}", path, ec.message()));
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (in.gcount() != size || in.bad()) throw std::runtime_error(fmt::format("{}: read error", path));
  return bytes;
}

namespace {
// The temporary's name: ".<file name>.tmp-" + 6 characters from mkstemp, in the same directory.
std::filesystem::path temporary_prefix(const std::string& path) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  return dir / fmt::format(".{}.tmp-", target.filename().string());
}
}  // namespace

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path prefix = temporary_prefix(path);
  const std::string stem = prefix.filename().string();
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(prefix.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == stem.size() + 6 && name.starts_with(stem) && e.is_regular_file(ec))
      removed += fs::remove(e.path(), ec);
  }
  return removed;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, std::span(&bytes, 1));
}

namespace {
// Writes the parts to fd, from where it stands; false with errno set on a failed write.
bool write_parts(int fd, std::span<const std::string_view> parts) {
  for (const std::string_view bytes : parts) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = EIO;
        return false;
      }
      done += static_cast<size_t>(w);
    }
  }
  return true;
}

// The descriptor a path names in this process: /dev/stdout 1, /dev/stderr 2, /dev/fd/N and
// /proc/self/fd/N N; -1 for any other path.
int named_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!path.starts_with(prefix)) continue;
    const std::string_view n = std::string_view(path).substr(prefix.size());
    int fd = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), fd);
    return ec == std::errc() && end == n.data() + n.size() && !n.empty() ? fd : -1;
  }
  return -1;
}
}  // namespace

bool is_stdout(const std::string& path) {
  struct stat a = {};
  struct stat b = {};
  return named_descriptor(path) == 1 || (::stat(path.c_str(), &a) == 0 && ::fstat(1, &b) == 0 &&
                                         a.st_dev == b.st_dev && a.st_ino == b.st_ino);
}

void write_file_atomic(const std::string& path, std::span<const std::string_view> parts) {
  namespace fs = std::filesystem;
  const auto stream = [&](int fd, bool close_it) {  // written through, from where the descriptor stands
    const bool ok = write_parts(fd, parts);
    const int err = errno;
    if (close_it) ::close(fd);
    if (!ok)
      throw std::runtime_error(fmt::format("cannot write {}: write failed: {}", path, std::strerror(err)));
  };
  // --out /dev/stdout: the descriptor itself, at its offset (a shell's >> appends). Renaming over
  // the path would replace what it resolves to (a file stdout is redirected to), and reopening it
  // would write that file from its start.
  if (const int fd = named_descriptor(path); fd >= 0) return stream(fd, false);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // through symlinks
  if (fs::is_directory(st)) throw std::runtime_error(fmt::format("cannot write {}: is a directory", path));
  if (fs::is_block_file(st) || fs::is_socket(st))
    throw std::runtime_error(fmt::format("cannot write {}: not a regular file", path));
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A FIFO, a terminal, /dev/null: a stream, written through (a FIFO waits for its reader, as a
    // shell redirection does). A rename would replace the node itself (as root, /dev/null).
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    return stream(fd, true);
  }
  // A regular file, or none yet: replaced by a rename. A symlink is replaced itself, never the file
  // it names (which may be shared: a Hugging Face cache's blobs), as sed -i does.
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = temporary_prefix(path).string() + "XXXXXX";
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));

  auto fail = [&](const char* step) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmpl.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: {} failed: {} (previous file left unchanged)",
                                         path, step, std::strerror(err)));
  };
  if (!write_parts(fd, parts)) fail("write");
  if (::fchmod(fd, 0644) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: close failed: {}", path, std::strerror(err)));
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: rename failed: {}", path, std::strerror(err)));
  }
  // Make the rename itself durable.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tg::io
