# Optional parts of Shoal: the GUI, the Vulkan backend and the CUDA backend.
#
# Each option has three states:
#   AUTO (the default, for people who configure by hand): built when its dependencies are found;
#        otherwise off, and the summary says which dependency was missing;
#   ON   (what scripts/build passes): a missing dependency is a configure error that names the
#        Debian package to install — never a quiet OFF (a fresh machine once built no GUI at all
#        while CI, on a machine with the package left over, stayed green);
#   OFF: not built.
# After this file each SHOAL_<PART> variable is a plain ON/OFF that the rest of the build reads.

set(SHOAL_SUMMARY "")
macro(shoal_summary line)
  list(APPEND SHOAL_SUMMARY "${line}")
endmacro()

# shoal_resolve_part(<PART> <found?> <what is missing (with packages)>)
# Turns the user's AUTO/ON/OFF request for SHOAL_<PART> into the ON/OFF the build uses, and
# records why in SHOAL_<PART>_WHY for the summary.
function(shoal_resolve_part part found missing)
  set(request "${SHOAL_${part}_REQUEST}")
  string(TOUPPER "${request}" request)
  if(request STREQUAL "AUTO")
    if(found)
      set(value ON)
      set(why "auto: dependencies found")
    else()
      set(value OFF)
      set(why "auto: off because ${missing}")
    endif()
  elseif(request MATCHES "^(ON|YES|TRUE|1)$")
    if(NOT found)
      message(FATAL_ERROR "SHOAL_${part}=ON was asked for, but ${missing}. "
                          "Run scripts/setup, or configure with -DSHOAL_${part}=OFF.")
    endif()
    set(value ON)
    set(why "asked for")
  elseif(request MATCHES "^(OFF|NO|FALSE|0)$")
    set(value OFF)
    set(why "asked off")
  else()
    message(FATAL_ERROR "SHOAL_${part} must be AUTO, ON or OFF (got '${SHOAL_${part}_REQUEST}')")
  endif()
  set(SHOAL_${part} ${value} PARENT_SCOPE)
  set(SHOAL_${part}_WHY "${why}" PARENT_SCOPE)
endfunction()

# The request is a cache string; SHOAL_<PART> itself becomes a normal variable that shadows it.
# A cache left by an older configure may hold the resolved ON/OFF under the same name: that is
# a valid request too, so old build directories keep working.
foreach(part GUI VULKAN CUDA)
  set(SHOAL_${part} AUTO CACHE STRING "Build this part: AUTO (when found), ON (required), OFF")
  set_property(CACHE SHOAL_${part} PROPERTY STRINGS AUTO ON OFF)
  set(SHOAL_${part}_REQUEST "$CACHE{SHOAL_${part}}")
endforeach()

# GUI: Qt 6 Widgets + Charts + Sql + Concurrent (app/gui) and Test (every QtTest executable).
# Which package ships each CMake config, on Debian 12:
set(_gui_packages_Widgets qt6-base-dev)
set(_gui_packages_Sql qt6-base-dev)
set(_gui_packages_Concurrent qt6-base-dev)
set(_gui_packages_Test qt6-base-dev)
set(_gui_packages_Charts "qt6-charts-dev and libqt6opengl6-dev (Qt6Charts' config needs Qt6OpenGL)")
set(_gui_packages_OpenGL libqt6opengl6-dev)
if(NOT SHOAL_GUI_REQUEST STREQUAL "OFF")
  find_package(Qt6 QUIET COMPONENTS Core Widgets Charts Sql Concurrent Test)
endif()
set(_gui_missing "")
foreach(component Widgets Charts Sql Concurrent Test)
  if(NOT Qt6${component}_FOUND)
    list(APPEND _gui_missing "Qt6${component} (install ${_gui_packages_${component}})")
  endif()
endforeach()
if(_gui_missing STREQUAL "")
  set(_gui_found TRUE)
else()
  set(_gui_found FALSE)
  list(JOIN _gui_missing ", " _gui_missing)
  set(_gui_missing "these Qt 6 parts were not found: ${_gui_missing}")
endif()
shoal_resolve_part(GUI ${_gui_found} "${_gui_missing}")

# Vulkan: loader headers (libvulkan-dev) + glslc to compile the shaders (glslc).
if(NOT SHOAL_VULKAN_REQUEST STREQUAL "OFF")
  find_package(Vulkan QUIET COMPONENTS glslc)
endif()
set(_vk_missing "")
if(NOT Vulkan_FOUND)
  list(APPEND _vk_missing "the Vulkan loader and headers (install libvulkan-dev)")
endif()
if(NOT Vulkan_glslc_FOUND)
  list(APPEND _vk_missing "the shader compiler glslc (install glslc)")
endif()
if(_vk_missing STREQUAL "")
  set(_vk_found TRUE)
else()
  set(_vk_found FALSE)
  list(JOIN _vk_missing " and " _vk_missing)
  set(_vk_missing "${_vk_missing} not found")
endif()
shoal_resolve_part(VULKAN ${_vk_found} "${_vk_missing}")

# CUDA: the toolkit (nvcc + cuBLAS). The backend is a runtime-loaded plugin. The toolkit comes
# from NVIDIA (not Debian's nvidia-cuda-toolkit, which is too old for our architectures), so
# scripts/build asks for it only where nvcc exists.
if(NOT SHOAL_CUDA_REQUEST STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
endif()
if(CMAKE_CUDA_COMPILER)
  set(_cuda_found TRUE)
else()
  set(_cuda_found FALSE)
endif()
shoal_resolve_part(CUDA ${_cuda_found}
  "no CUDA compiler was found (install the CUDA Toolkit and put nvcc on PATH, or set CUDACXX)")

function(shoal_print_summary)
  message(STATUS "Shoal configuration:")
  message(STATUS "  build type     : ${CMAKE_BUILD_TYPE}")
  message(STATUS "  engine only    : ${SHOAL_ENGINE_ONLY}")
  message(STATUS "  GUI (Qt 6)     : ${SHOAL_GUI}  (${SHOAL_GUI_WHY}; Qt ${Qt6_VERSION})")
  message(STATUS "  Vulkan backend : ${SHOAL_VULKAN}  (${SHOAL_VULKAN_WHY})")
  message(STATUS "  CUDA backend   : ${SHOAL_CUDA}  (${SHOAL_CUDA_WHY}; nvcc: ${CMAKE_CUDA_COMPILER})")
  message(STATUS "  sanitizers     : ${SHOAL_SANITIZE}")
  message(STATUS "  ccache         : ${SHOAL_CCACHE}")
  foreach(line IN LISTS SHOAL_SUMMARY)
    message(STATUS "  ${line}")
  endforeach()
endfunction()
