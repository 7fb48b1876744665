# Windows: an NSIS installer (plus a ZIP). Written, NOT tested: Shoal has not been built on
# Windows yet (the CPU backend and the apps use POSIX calls: mmap, dlopen, /proc). See
# installers/README.md.
if(WIN32)
  set(CPACK_GENERATOR "NSIS;ZIP")
  set(CPACK_NSIS_DISPLAY_NAME "Shoal")
  set(CPACK_NSIS_PACKAGE_NAME "Shoal")
  set(CPACK_NSIS_ENABLE_UNINSTALL_BEFORE_INSTALL ON)
  set(CPACK_NSIS_MODIFY_PATH ON)
  set(CPACK_NSIS_INSTALLED_ICON_NAME "bin\\\\shoal.exe")
  set(CPACK_NSIS_MENU_LINKS "bin/shoal.exe" "Shoal")
  set(CPACK_NSIS_URL_INFO_ABOUT "${CPACK_PACKAGE_HOMEPAGE_URL}")
endif()
