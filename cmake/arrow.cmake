# Apache Arrow C++ (libarrow, libparquet) for Parquet and Arrow IPC datasets
# (docs/data_model.md 1.1). Found, in order: Apache's CMake packages
# (find_package(Arrow/Parquet)); else the C++ libraries and headers that the
# PyPI `pyarrow` wheel ships, asked of Python3_EXECUTABLE, /usr/bin/python3 and
# TOKFEED_HF_PYTHON (scripts/deps.sh installs pyarrow for /usr/bin/python3).
# AUTO builds without Parquet support when neither is found; ON requires it.
# Defines the target tokfeed_arrow and TOKFEED_ARROW_FOUND; TOKFEED_S3_FOUND
# (and TOKFEED_WITH_S3 in tokfeed_arrow) when its S3FileSystem links.
set(TOKFEED_WITH_ARROW AUTO CACHE STRING "Read Parquet and Arrow datasets through Arrow C++: AUTO, ON or OFF")
set_property(CACHE TOKFEED_WITH_ARROW PROPERTY STRINGS AUTO ON OFF)
set(TOKFEED_ARROW_FOUND OFF)
set(TOKFEED_S3_FOUND OFF)
set(_arrow_from "")

if(NOT TOKFEED_WITH_ARROW STREQUAL "OFF")
  find_package(Arrow CONFIG QUIET)
  find_package(Parquet CONFIG QUIET)
  if(Arrow_FOUND AND Parquet_FOUND AND TARGET Parquet::parquet_shared)
    add_library(tokfeed_arrow INTERFACE)
    target_link_libraries(tokfeed_arrow INTERFACE Parquet::parquet_shared Arrow::arrow_shared)
    set(_arrow_from "Apache's packages, Arrow ${Arrow_VERSION}")
  else()
    set(_pys "")
    foreach(_py IN ITEMS "${Python3_EXECUTABLE}" /usr/bin/python3 "${TOKFEED_HF_PYTHON}")
      if(_py AND EXISTS "${_py}" AND NOT _py IN_LIST _pys)
        list(APPEND _pys "${_py}")
      endif()
    endforeach()
    foreach(_py IN LISTS _pys)
      execute_process(
        # Located without importing it (an import can fail on an unrelated
        # NumPy), as pyarrow.get_include() and get_library_dirs() would.
        COMMAND "${_py}" -c "import importlib.util as u, importlib.metadata as m, os; d = u.find_spec('pyarrow').submodule_search_locations[0]; print(os.path.join(d, 'include')); print(d); print(m.version('pyarrow'))"
        OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT _rc EQUAL 0)
        continue()
      endif()
      string(REPLACE "\n" ";" _out "${_out}")
      list(GET _out 0 _inc)
      list(GET _out 1 _libdir)
      list(GET _out 2 _ver)
      # The wheel's libraries carry versioned names only (libarrow.so.2600);
      # link them by full path. Their sonames and RUNPATH ($ORIGIN) find the rest.
      file(GLOB _libarrow "${_libdir}/libarrow.so.[0-9]*")
      file(GLOB _libparquet "${_libdir}/libparquet.so.[0-9]*")
      # S3 (s3:// datasets) is inside libarrow up to Arrow 21; later wheels
      # ship it as libarrow_s3.
      file(GLOB _libarrow_s3 "${_libdir}/libarrow_s3.so.[0-9]*")
      list(FILTER _libarrow EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
      list(FILTER _libparquet EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
      list(FILTER _libarrow_s3 EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
      if(NOT _libarrow OR NOT _libparquet OR NOT EXISTS "${_inc}/parquet/arrow/reader.h")
        continue()
      endif()
      list(GET _libarrow 0 _libarrow)
      list(GET _libparquet 0 _libparquet)
      # The wheel must share this compiler's C++ ABI (_GLIBCXX_USE_CXX11_ABI):
      # a program that passes std::string across the boundary must link.
      include(CheckCXXSourceCompiles)
      set(CMAKE_REQUIRED_INCLUDES "${_inc}")
      set(CMAKE_REQUIRED_LIBRARIES "${_libparquet};${_libarrow}")
      set(CMAKE_REQUIRED_LINK_OPTIONS "-Wl,-rpath,${_libdir}")
      set(CMAKE_REQUIRED_QUIET ON)
      unset(TOKFEED_ARROW_ABI_OK CACHE)
      check_cxx_source_compiles([[
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
int main() {
  auto f = arrow::io::ReadableFile::Open(std::string("x"));
  return f.status().ToString().empty();
}]] TOKFEED_ARROW_ABI_OK)
      unset(CMAKE_REQUIRED_INCLUDES)
      unset(CMAKE_REQUIRED_LIBRARIES)
      unset(CMAKE_REQUIRED_LINK_OPTIONS)
      unset(CMAKE_REQUIRED_QUIET)
      if(NOT TOKFEED_ARROW_ABI_OK)
        message(STATUS "Arrow: pyarrow ${_ver} of ${_py} does not link here (C++ ABI or version); not used")
        continue()
      endif()
      # Arrow's S3FileSystem, which the object fetcher uses (dataset/object_store.hpp).
      set(CMAKE_REQUIRED_INCLUDES "${_inc}")
      set(CMAKE_REQUIRED_LIBRARIES "${_libarrow_s3};${_libarrow}")
      set(CMAKE_REQUIRED_LINK_OPTIONS "-Wl,-rpath,${_libdir}")
      set(CMAKE_REQUIRED_QUIET ON)
      unset(TOKFEED_ARROW_S3_OK CACHE)
      check_cxx_source_compiles([[
#include <arrow/filesystem/s3fs.h>
int main() { return arrow::fs::InitializeS3(arrow::fs::S3GlobalOptions::Defaults()).ok() ? 0 : 1; }]]
        TOKFEED_ARROW_S3_OK)
      unset(CMAKE_REQUIRED_INCLUDES)
      unset(CMAKE_REQUIRED_LIBRARIES)
      unset(CMAKE_REQUIRED_LINK_OPTIONS)
      unset(CMAKE_REQUIRED_QUIET)
      add_library(tokfeed_arrow INTERFACE)
      target_include_directories(tokfeed_arrow SYSTEM INTERFACE "${_inc}")
      target_link_libraries(tokfeed_arrow INTERFACE "${_libparquet}" ${_libarrow_s3} "${_libarrow}")
      if(TOKFEED_ARROW_S3_OK)
        target_compile_definitions(tokfeed_arrow INTERFACE TOKFEED_WITH_S3=1)
      endif()
      # Linked by full path, so CMake puts ${_libdir} in the binaries' RUNPATH.
      set(_arrow_from "the pyarrow ${_ver} wheel of ${_py} (${_libdir})")
      break()
    endforeach()
  endif()
  if(TARGET tokfeed_arrow)
    set(TOKFEED_ARROW_FOUND ON)
    target_compile_definitions(tokfeed_arrow INTERFACE TOKFEED_WITH_ARROW=1)
    message(STATUS "Arrow: Parquet and Arrow datasets through ${_arrow_from}")
    if(TOKFEED_ARROW_S3_OK)
      set(TOKFEED_S3_FOUND ON)
      message(STATUS "Arrow: s3:// datasets through its S3FileSystem")
    else()
      message(STATUS "Arrow: no S3FileSystem in this Arrow; s3:// datasets are disabled")
    endif()
  elseif(TOKFEED_WITH_ARROW STREQUAL "ON")
    message(FATAL_ERROR "TOKFEED_WITH_ARROW=ON: found neither Apache's Arrow/Parquet CMake packages nor a pyarrow "
                        "wheel (run scripts/deps.sh, or pip install pyarrow for ${Python3_EXECUTABLE})")
  else()
    message(STATUS "Arrow: not found; Parquet and Arrow datasets are disabled (run scripts/deps.sh to enable them)")
  endif()
endif()
