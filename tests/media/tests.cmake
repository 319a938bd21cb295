# tests/media: the unit tests link the media library (the engine the other unit tests link does not), and
# media_vs_pillow.py holds DecodeImage/PrepareImage to Pillow on images it generates, through media_probe.
foreach(media_unit_test media_test wav_container_test)
  if(TARGET ${media_unit_test})
    target_link_libraries(${media_unit_test} PRIVATE layerpipe_media)
  endif()
endforeach()
add_executable(media_probe ${CMAKE_CURRENT_LIST_DIR}/media_probe.cc)
target_link_libraries(media_probe PRIVATE layerpipe_media)
add_test(NAME media_vs_pillow
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/media_vs_pillow.py --probe $<TARGET_FILE:media_probe>)
set_tests_properties(media_vs_pillow PROPERTIES TIMEOUT 120)
