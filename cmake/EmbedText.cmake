# Generates a C++ source defining `std::string_view FUNCTION()` in namespace NAMESPACE that returns the text of INPUT,
# as a raw string literal: the page of `detnccl report` is compiled into the program (no file lookup at run time).
#   cmake -DINPUT=... -DOUTPUT=... -DHEADER=... -DNAMESPACE=... -DFUNCTION=... -P EmbedText.cmake
file(READ "${INPUT}" content)
set(delimiter "detnccl_embed")
string(FIND "${content}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw string's end, )${delimiter}\": change the delimiter in ${CMAKE_CURRENT_LIST_FILE}")
endif()
get_filename_component(input_name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${input_name} by cmake/EmbedText.cmake: do not edit.
#include \"${HEADER}\"

namespace ${NAMESPACE} {

std::string_view ${FUNCTION}() {
  static constexpr char kText[] = R\"${delimiter}(${content})${delimiter}\";
  return {kText, sizeof kText - 1};
}

}  // namespace ${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
