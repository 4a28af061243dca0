# Finds the CUDA toolkit and NCCL under DETNCCL_CUDA_ROOT. Sets:
#   DETNCCL_HAVE_CUDA               ON when the CUDA language is enabled and CUDA parts are built
#   DETNCCL_REAL_NCCL_INCLUDE_DIR   directory of the real nccl.h, when one is found (ABI test)
#   DETNCCL_REAL_NCCL_LIBRARY       the real libnccl.so.2, when one is found (tests of the shim over real NCCL)
#   DETNCCL_CUDA_INCLUDE_DIR        directory of cuda_runtime.h, which the real nccl.h includes
set(DETNCCL_HAVE_CUDA OFF)
if(NOT DETNCCL_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "${DETNCCL_CUDA_ROOT}/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "${DETNCCL_CUDA_ROOT}/bin/nvcc")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # RATIONALE: compiling for every architecture costs CI minutes on 2 cores; H100/H200 is the target.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # RATIONALE: CMake 3.25 knows no C++20 flag for nvcc (3.26 added it) and then refuses CUDA_STANDARD 20;
    # nvcc 12 and later accept -std=c++20.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(DETNCCL_HAVE_CUDA ON)
  elseif(DETNCCL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DETNCCL_CUDA=ON but no CUDA compiler was found under ${DETNCCL_CUDA_ROOT} "
                        "(set DETNCCL_CUDA_ROOT or CMAKE_CUDA_COMPILER, or use DETNCCL_CUDA=OFF)")
  else()
    message(STATUS "CUDA toolkit not found under ${DETNCCL_CUDA_ROOT}: building the CPU-only parts")
  endif()
endif()

find_path(DETNCCL_REAL_NCCL_INCLUDE_DIR nccl.h HINTS "${DETNCCL_CUDA_ROOT}/include" ENV NCCL_HOME
          PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(DETNCCL_CUDA_INCLUDE_DIR cuda_runtime.h HINTS "${DETNCCL_CUDA_ROOT}/include" NO_DEFAULT_PATH)
find_file(DETNCCL_REAL_NCCL_LIBRARY libnccl.so.2 HINTS "${DETNCCL_CUDA_ROOT}/lib64" "${DETNCCL_CUDA_ROOT}/lib"
          NO_DEFAULT_PATH)
