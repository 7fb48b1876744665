# macOS: the desktop app as Shoal.app (CPack "Bundle"/DragNDrop generator). Written, NOT tested:
# nobody has built Shoal on macOS yet (no Metal backend; CPU only). See installers/README.md.
if(APPLE)
  set(CPACK_BUNDLE_NAME "Shoal")
  set(CPACK_BUNDLE_PLIST "${CMAKE_CURRENT_LIST_DIR}/Info.plist")
  set(CPACK_BUNDLE_ICON "${CMAKE_CURRENT_LIST_DIR}/shoal.icns")  # to be made from resources/icons
  set(CPACK_DMG_VOLUME_NAME "Shoal")
  set(CPACK_GENERATOR "DragNDrop")
endif()
