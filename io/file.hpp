// Whole files: read at once with errors that name the file; written atomically so that a crash,
// a full disk or a kill never leaves a half-written file where a good one was.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tg::io {

// The file's bytes; std::runtime_error "<path>: cannot open: <reason>" (or "is a directory",
// "read error") otherwise.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` so that a crash or a failed write never leaves a partial file:
// a temporary file in the same directory, write, fflush + fsync, rename over `path`, fsync of the
// directory. On any error the temporary is removed, `path` keeps its previous content, and a
// std::runtime_error names the path and the system error. A symlink is replaced, not the file it
// names. Streams are written through, not replaced: /dev/stdout, /dev/stderr, /dev/fd/N and
// /proc/self/fd/N as this process's descriptor (at its offset), an existing FIFO or character
// device (/dev/null, a terminal) opened for writing; a block device, a socket or a directory is an
// error.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The same with the file's bytes given in parts, written one after the other (no copy into one
// buffer: a checkpoint is saved without a second copy of its tensors in memory).
void write_file_atomic(const std::string& path, std::span<const std::string_view> parts);
// Whether `path` names this process's standard output (/dev/stdout, or the file or terminal stdout
// is): where the programs print their "wrote ..." notes to stderr instead.
bool is_stdout(const std::string& path);
// Removes the temporaries write_file_atomic(path, ...) leaves behind when the process is killed
// (kill -9, power loss) between creating and renaming them. Returns how many were removed.
int remove_stale_temporaries(const std::string& path);

}  // namespace tg::io
