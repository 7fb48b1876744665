# Optional parts of Shoal default to ON when their dependencies are found, and say what they found.

set(SHOAL_SUMMARY "")
macro(shoal_summary line)
  list(APPEND SHOAL_SUMMARY "${line}")
endmacro()

# GUI: Qt 6 Widgets + Charts + Sql.
find_package(Qt6 QUIET COMPONENTS Core Widgets Charts Sql Test)
if(Qt6Widgets_FOUND AND Qt6Charts_FOUND AND Qt6Sql_FOUND)
  set(_gui_default ON)
else()
  set(_gui_default OFF)
endif()
option(SHOAL_GUI "Build the Qt 6 desktop app" ${_gui_default})

# Vulkan: loader headers + glslc to compile the shaders.
find_package(Vulkan QUIET COMPONENTS glslc)
if(Vulkan_FOUND AND Vulkan_glslc_FOUND)
  set(_vk_default ON)
else()
  set(_vk_default OFF)
endif()
option(SHOAL_VULKAN "Build the Vulkan backend" ${_vk_default})

# CUDA: the toolkit (nvcc + cuBLAS). The backend is a runtime-loaded plugin.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_default ON)
else()
  set(_cuda_default OFF)
endif()
option(SHOAL_CUDA "Build the CUDA backend plugin" ${_cuda_default})

function(shoal_print_summary)
  message(STATUS "Shoal configuration:")
  message(STATUS "  build type     : ${CMAKE_BUILD_TYPE}")
  message(STATUS "  engine only    : ${SHOAL_ENGINE_ONLY}")
  message(STATUS "  GUI (Qt 6)     : ${SHOAL_GUI}  (Qt6 found: ${Qt6_FOUND} ${Qt6_VERSION})")
  message(STATUS "  Vulkan backend : ${SHOAL_VULKAN}  (loader: ${Vulkan_FOUND}, glslc: ${Vulkan_glslc_FOUND})")
  message(STATUS "  CUDA backend   : ${SHOAL_CUDA}  (nvcc: ${CMAKE_CUDA_COMPILER})")
  message(STATUS "  sanitizers     : ${SHOAL_SANITIZE}")
  message(STATUS "  ccache         : ${SHOAL_CCACHE}")
  foreach(line IN LISTS SHOAL_SUMMARY)
    message(STATUS "  ${line}")
  endforeach()
endfunction()
