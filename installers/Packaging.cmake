# CPack packaging: Debian packages and a portable tarball (tested); NSIS and macOS bundle
# configuration (written, untested: see installers/README.md). Included at the end of the top-level
# CMakeLists.txt, after every install() rule.
#
#   cmake -S . -B build-pkg -G Ninja -DCMAKE_INSTALL_PREFIX=/usr && cmake --build build-pkg
#   cd build-pkg && cpack -G DEB      # shoal_<v>_<arch>.deb (+ shoal-cuda_<v>_<arch>.deb with CUDA)
#   cd build-pkg && cpack -G TGZ      # shoal-<v>-Linux.tar.gz, everything under one relocatable tree
#
# Packages: `shoal` holds shoal, shoal-cli (and its helper lib/shoal/shoal-cli-net), shoal-node,
# the desktop entry and icon, the systemd unit for shoal-node (user `shoal`, created by postinst),
# shoal-fetch-default-model and an empty /usr/share/shoal/models; models are not packaged. `shoal-cuda` holds the CUDA plugin (lib/shoal/libshoal-cuda.so, found next to
# ../lib/shoal from the executables) and is a Recommends of `shoal`, built only with SHOAL_CUDA.

include(GNUInstallDirs)

# The unit names absolute paths: where the .deb puts things (CPack's Debian prefix is /usr).
set(SHOAL_BIN_DIR "/usr/bin")
set(SHOAL_DOC_DIR "/usr/share/doc/shoal")
configure_file(${CMAKE_CURRENT_LIST_DIR}/systemd/shoal-node.service.in
               ${CMAKE_BINARY_DIR}/installers/shoal-node.service @ONLY)
# Debian 12 has merged /usr: lib/systemd/system under the /usr prefix is where units belong.
install(FILES ${CMAKE_BINARY_DIR}/installers/shoal-node.service DESTINATION lib/systemd/system)
install(PROGRAMS ${CMAKE_CURRENT_LIST_DIR}/shoal-fetch-default-model
        DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The system-wide models folder every program searches (engine/model/default_model.h), shipped
# empty: an administrator may put GGUF files there for every user of the machine.
install(DIRECTORY DESTINATION ${CMAKE_INSTALL_DATADIR}/shoal/models)
# lib/shoal, not CMAKE_INSTALL_LIBDIR/shoal: with the /usr prefix on Debian that is the multiarch
# lib/x86_64-linux-gnu, where the loader (kernels/cuda/cuda_loader.cpp, ../lib/shoal from the
# executables) would not find the plugin. shoal-cli's helper lies there too (app/cli).
if(TARGET shoal_cuda_plugin)
  install(TARGETS shoal_cuda_plugin LIBRARY DESTINATION lib/shoal COMPONENT cuda)
endif()

set(CPACK_PACKAGE_NAME "shoal")
set(CPACK_PACKAGE_VENDOR "Shoal")
set(CPACK_PACKAGE_CONTACT "Shoal maintainers <shoal@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Chat with local LLMs and pool the GPUs of your LAN")
set(CPACK_PACKAGE_DESCRIPTION
    "Shoal runs GGUF language models locally (CPU, Vulkan, CUDA) with a desktop chat app, a\n"
    "command-line tool and a headless node that serves an OpenAI-compatible API.")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://example.invalid/shoal")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "Shoal")
set(CPACK_PACKAGE_EXECUTABLES "shoal;Shoal")
set(CPACK_STRIP_FILES ON)
set(CPACK_SOURCE_GENERATOR "")
set(CPACK_GENERATOR "DEB;TGZ")

# Components: everything without a COMPONENT is "Unspecified" and becomes the `shoal` package.
set(CPACK_COMPONENTS_ALL Unspecified)
if(TARGET shoal_cuda_plugin)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
endif()

# --- Debian ---------------------------------------------------------------------------------
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # dependencies from the binaries (dpkg-shlibdeps)
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_NAME "shoal")
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_SUGGESTS "python3-pip")
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_CONTROL_EXTRA
    "${CMAKE_CURRENT_LIST_DIR}/debian/postinst;${CMAKE_CURRENT_LIST_DIR}/debian/prerm;${CMAKE_CURRENT_LIST_DIR}/debian/postrm")
set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_CONTROL_STRICT_PERMISSION ON)
if(TARGET shoal_cuda_plugin)
  set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_RECOMMENDS "shoal-cuda (= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME "shoal-cuda")
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "shoal (= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_CUDA_DESCRIPTION
      "Shoal CUDA backend plugin\n The CUDA runtime and cuBLAS are linked in; needs the NVIDIA driver.")
endif()

# --- portable tarball -------------------------------------------------------------------------
# One tree (bin/, lib/shoal/, share/); the executables find the CUDA plugin relative to themselves.
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)

# --- Windows (NSIS) and macOS (bundle): written, not tested --------------------------------------
include(${CMAKE_CURRENT_LIST_DIR}/windows/Nsis.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/macos/MacBundle.cmake)

include(CPack)
