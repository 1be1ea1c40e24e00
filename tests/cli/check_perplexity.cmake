# The shipped model's perplexity on the start of the held-out Brown text, with both attention
# backends: each must stay below BOUND (a garbage-output regression multiplies it), and the two
# backends must agree within 0.5%.
set(_ppl)
foreach(_backend mla standard)
  execute_process(COMMAND ${EXE} perplexity --model ${MODEL} --file ${TEXT} --ctx 256 --max-tokens ${MAX_TOKENS}
                          --attention ${_backend} --threads 2
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "latte perplexity (${_backend}) failed with ${rc}:\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "^ppl ([0-9.]+) ")
    message(FATAL_ERROR "unexpected output of latte perplexity (${_backend}):\n${out}")
  endif()
  set(_value ${CMAKE_MATCH_1})
  message(STATUS "${_backend}: ${out}")
  if(_value GREATER_EQUAL BOUND)
    message(FATAL_ERROR "perplexity ${_value} with ${_backend} is not below the bound ${BOUND}: the model's output has degraded")
  endif()
  list(APPEND _ppl ${_value})
endforeach()
list(GET _ppl 0 _mla)
list(GET _ppl 1 _standard)
# CMake's math() is integer-only: compare in units of 1e-4.
foreach(_v _mla _standard)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)" _m "${${_v}}")
  set(_frac "${CMAKE_MATCH_2}0000")
  string(SUBSTRING "${_frac}" 0 4 _frac)
  math(EXPR ${_v}_e4 "${CMAKE_MATCH_1} * 10000 + 1${_frac} - 10000")
endforeach()
math(EXPR _diff "${_mla_e4} - ${_standard_e4}")
if(_diff LESS 0)
  math(EXPR _diff "-${_diff}")
endif()
math(EXPR _limit "${_mla_e4} / 200")  # 0.5%
if(_diff GREATER _limit)
  message(FATAL_ERROR "mla perplexity ${_mla} and standard ${_standard} differ by more than 0.5%")
endif()
