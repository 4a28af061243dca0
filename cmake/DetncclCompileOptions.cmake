# Warnings and sanitizers for every detnccl target: link `detnccl_options` (PRIVATE) into each target.
add_library(detnccl_options INTERFACE)
target_compile_options(detnccl_options INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wformat=2 -Wimplicit-fallthrough>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
  $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${DETNCCL_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DETNCCL_WERROR}>>:-Werror=all-warnings>)

if(DETNCCL_SANITIZE)
  if(NOT DETNCCL_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "DETNCCL_SANITIZE must be empty, 'address,undefined' or 'thread' (got '${DETNCCL_SANITIZE}')")
  endif()
  # Applied to the whole tree (not per target) so that every object, including test binaries, agrees.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${DETNCCL_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${DETNCCL_SANITIZE})
endif()
