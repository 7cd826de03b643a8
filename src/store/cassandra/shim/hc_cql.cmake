# The Cassandra backend's CQL driver shim (src/store/cassandra/shim/, docs/CASSANDRA.md "The
# driver"): a Rust static library over the `scylla` crate, built by cargo. Crates come from
# crates.io into ~/.cargo (Cargo.lock pins them; nothing is vendored), so a machine that has
# them builds offline. The compiled crates live in one target directory under HC_CACHE_DIR
# (default ~/.cache/hotcount/cargo-target) shared by every build directory: the first build
# pays for the driver (2.5-8 min on 2 loaded cores, 2026-12-05), the next ones only ask cargo.
#
# HC_CASSANDRA: AUTO (the default: build it when cargo is found), ON (cargo required), OFF.
# Without it everything else builds, and configure says the Cassandra backend is not built.
# Defines: HC_HAVE_CASSANDRA (ON/OFF) and, when ON, the imported library hc_cql.
set(HC_CASSANDRA AUTO CACHE STRING "Build the Cassandra driver shim with cargo: AUTO, ON or OFF")
set_property(CACHE HC_CASSANDRA PROPERTY STRINGS AUTO ON OFF)
set(HC_HAVE_CASSANDRA OFF)
set(hc_cql_src ${CMAKE_CURRENT_LIST_DIR})
if(HC_CASSANDRA STREQUAL "OFF")
  message(STATUS "Cassandra backend: not built (HC_CASSANDRA=OFF)")
else()
  find_program(HC_CARGO cargo HINTS $ENV{HOME}/.cargo/bin)
  if(NOT HC_CARGO)
    if(HC_CASSANDRA STREQUAL "ON")
      message(FATAL_ERROR "HC_CASSANDRA=ON needs cargo (apt-get install cargo, or rustup)")
    endif()
    message(WARNING "Cassandra backend: not built (cargo not found; HC_CASSANDRA=AUTO)")
  else()
    if(DEFINED ENV{HC_CACHE_DIR})
      set(hc_cql_target $ENV{HC_CACHE_DIR}/cargo-target)
    else()
      set(hc_cql_target $ENV{HOME}/.cache/hotcount/cargo-target)
    endif()
    set(hc_cql_lib ${hc_cql_target}/release/libhc_cql.a)
    # Runs at every build: cargo itself decides whether anything changed (about a second when
    # nothing did). Two cores shared with everything else: -j 2.
    add_custom_target(hc_cql_build
      COMMAND ${CMAKE_COMMAND} -E env CARGO_TARGET_DIR=${hc_cql_target}
              ${HC_CARGO} build --release --locked -j 2 --quiet
              --manifest-path ${hc_cql_src}/Cargo.toml
      BYPRODUCTS ${hc_cql_lib}
      WORKING_DIRECTORY ${hc_cql_src}
      COMMENT "cargo: the Cassandra driver shim (src/store/cassandra/shim)"
      USES_TERMINAL)
    add_library(hc_cql STATIC IMPORTED GLOBAL)
    # The native libraries the crate needs (cargo rustc -- --print native-static-libs).
    set_target_properties(hc_cql PROPERTIES
      IMPORTED_LOCATION ${hc_cql_lib}
      INTERFACE_INCLUDE_DIRECTORIES ${hc_cql_src}
      INTERFACE_LINK_LIBRARIES "ssl;crypto;gcc_s;util;rt;pthread;m;dl")
    add_dependencies(hc_cql hc_cql_build)
    set(HC_HAVE_CASSANDRA ON)
    message(STATUS "Cassandra backend: driver shim built by ${HC_CARGO} into ${hc_cql_target}")
  endif()
endif()
