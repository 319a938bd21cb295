# deploy/mpirun.sh run under a real mpirun (3 ranks: coordinator and 2 workers) against the local engine's
# greedy ids, the failure without workers, and a static check of deploy/slurm/layerpipe.sbatch.
add_test(NAME launch_mpirun
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/launch_test.py
                 --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin
                 --work ${CMAKE_BINARY_DIR}/test_data/launch)
set_tests_properties(launch_mpirun PROPERTIES TIMEOUT 300)

# layerpipe-mpi under a real mpirun (3 ranks): ids equal to the local engine's, frames between the worker
# ranks over MPI, clean shutdown on the client's exit and on SIGTERM, and the start-up failures. Only
# where MPI was found at configure time (mpi/CMakeLists.txt).
if(TARGET layerpipe-mpi)
  add_test(NAME launch_layerpipe_mpi
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/mpi_test.py
                   --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin
                   --work ${CMAKE_BINARY_DIR}/test_data/launch_mpi)
  set_tests_properties(launch_layerpipe_mpi PROPERTIES TIMEOUT 180)
endif()

# --help (every flag, exit 0) and --version (the project's version and commit) of the servers and the CLI.
add_test(NAME help_and_version
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/help_version_test.py
                 --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin)
set_tests_properties(help_and_version PROPERTIES TIMEOUT 60)
