# Driven by ctest (see CMakeLists.txt next to this file): builds and runs tests/package/consumer.
if(NOT CONFIG)
  set(CONFIG Release)
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
endfunction()

set(consumer_src ${LATTE_SOURCE_DIR}/tests/package/consumer)
if(MODE STREQUAL "install")
  run_step(${CMAKE_COMMAND} --install ${LATTE_BINARY_DIR} --prefix ${WORK_DIR}/prefix --config ${CONFIG})
  run_step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/build -G ${GENERATOR}
           -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  # what is checked is that the library builds, links and runs inside a consumer's tree, not its optimised code:
  # unoptimised, its ~100 sources compile in a fraction of the time (this was the longest CPU-side test)
  run_step(${CMAKE_COMMAND} -S ${consumer_src} -B ${WORK_DIR}/build -G ${GENERATOR}
           -DCMAKE_BUILD_TYPE=${CONFIG} -DLATTE_CONSUMER_USE_SUBDIRECTORY=${LATTE_SOURCE_DIR}
           -DLATTE_CUDA=OFF -DCMAKE_CXX_FLAGS_RELEASE=-O0 -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0
           -DCMAKE_CXX_FLAGS_MINSIZEREL=-O0)
endif()
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build --config ${CONFIG} --parallel 2)
run_step(${WORK_DIR}/build/latte_consumer)
message(STATUS "package test (${MODE}) passed")
