#include "gguf/file_mapping.hpp"

#include <latte/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace latte::gguf {
namespace {

[[noreturn]] void throw_io(const std::string& path, const char* what, int err) {
  throw Error(ErrorCode::io, path + ": cannot " + what + ": " + std::strerror(err));
}

// Closes a descriptor on every path out of the constructor.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

FileMapping::FileMapping(const std::string& path, MappingAccess access) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) throw Error(ErrorCode::not_found, path + ": no such file");
    throw_io(path, "open", errno);
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw_io(path, "stat", errno);
  if (!S_ISREG(info.st_mode)) throw Error(ErrorCode::io, path + ": not a regular file");
  size_ = static_cast<size_t>(info.st_size);
  if (size_ == 0) return;
  void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (address == MAP_FAILED) {
    size_ = 0;
    throw_io(path, "map", errno);
  }
  data_ = static_cast<const std::byte*>(address);
  if (access == MappingAccess::sequential) ::madvise(address, size_, MADV_SEQUENTIAL);
}

FileMapping::FileMapping(FileMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

FileMapping& FileMapping::operator=(FileMapping&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

FileMapping::~FileMapping() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

void FileMapping::release(std::span<const std::byte> range) const noexcept {
  if (!data_ || range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  // madvise works on whole pages: shrink the range to the pages it covers completely.
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(range.data());
  const auto end = begin + range.size();
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace latte::gguf
