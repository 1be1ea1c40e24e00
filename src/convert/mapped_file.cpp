#include "convert/mapped_file.hpp"

#include <latte/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace latte::convert {
namespace {

[[noreturn]] void throw_io(const std::string& path, const char* what, int err) {
  throw Error(ErrorCode::io, path + ": cannot " + what + ": " + std::strerror(err));
}

// Closes the descriptor on every way out of the constructor (the mapping outlives it).
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  Descriptor file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::not_found, path_ + ": no such file");
    throw_io(path_, "open", errno);
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw_io(path_, "stat", errno);
  if (!S_ISREG(info.st_mode)) throw Error(ErrorCode::io, path_ + ": not a regular file");
  size_ = static_cast<size_t>(info.st_size);
  if (size_ == 0) return;
  void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (address == MAP_FAILED) {
    size_ = 0;
    throw_io(path_, "map", errno);
  }
  data_ = static_cast<const std::byte*>(address);
  // Tensors are read front to back in large runs: ask for aggressive read-ahead.
  ::madvise(address, size_, MADV_SEQUENTIAL);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

void MappedFile::release(std::span<const std::byte> range) const noexcept {
  if (!data_ || range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  // madvise works on whole pages: shrink the range to the pages it covers completely.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(range.data());
  const auto end = begin + range.size();
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace latte::convert
