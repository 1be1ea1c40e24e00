# Sourced by the build scripts: puts the CUDA toolkit on PATH when it is installed.
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
LATTE_JOBS=${LATTE_JOBS:-$(nproc)}
LATTE_CMAKE_LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LATTE_CMAKE_LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
