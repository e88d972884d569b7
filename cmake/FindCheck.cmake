# FindCheck: the Check unit-test framework, as the imported target Check::check.
# Tries pkg-config first (Debian's `check` package), then find_path/find_library under
# CMAKE_PREFIX_PATH (the GPU machine, where ../shared/gpu/prep unpacks Check into .deps/prefix).
include(FindPackageHandleStandardArgs)

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_CHECK QUIET IMPORTED_TARGET check)
endif()

if(PC_CHECK_FOUND)
  set(Check_VERSION ${PC_CHECK_VERSION})
  # pkg-config leaves INCLUDE_DIRS empty for /usr/include; find the header to be sure it is there.
  find_path(Check_INCLUDE_DIR check.h HINTS ${PC_CHECK_INCLUDE_DIRS} ${PC_CHECK_INCLUDEDIR})
  set(Check_LIBRARY PkgConfig::PC_CHECK)
  if(NOT TARGET Check::check)
    add_library(Check::check INTERFACE IMPORTED)
    target_link_libraries(Check::check INTERFACE PkgConfig::PC_CHECK)
  endif()
else()
  find_path(Check_INCLUDE_DIR check.h)
  find_library(Check_LIBRARY NAMES check_pic check)
  find_library(Check_SUBUNIT_LIBRARY NAMES subunit)
  find_library(Check_M_LIBRARY NAMES m)
  find_library(Check_RT_LIBRARY NAMES rt)
  if(Check_INCLUDE_DIR AND Check_LIBRARY AND NOT TARGET Check::check)
    find_package(Threads REQUIRED)
    add_library(Check::check INTERFACE IMPORTED)
    target_include_directories(Check::check INTERFACE ${Check_INCLUDE_DIR})
    target_link_libraries(Check::check INTERFACE ${Check_LIBRARY} Threads::Threads)
    foreach(extra Check_SUBUNIT_LIBRARY Check_M_LIBRARY Check_RT_LIBRARY)
      if(${extra})
        target_link_libraries(Check::check INTERFACE ${${extra}})
      endif()
    endforeach()
  endif()
endif()

find_package_handle_standard_args(Check REQUIRED_VARS Check_LIBRARY Check_INCLUDE_DIR
  VERSION_VAR Check_VERSION)
