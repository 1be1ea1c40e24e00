// doctest entry point of latte_cuda_host_tests: device-code logic (block decoders, realignment)
// compiled by nvcc and run on the host, so CI checks it without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
