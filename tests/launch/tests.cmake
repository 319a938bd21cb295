# deploy/mpirun.sh run under a real mpirun (3 ranks: coordinator and 2 workers) against the local engine's
# greedy ids, the failure without workers, and a static check of deploy/slurm/layerpipe.sbatch.
add_test(NAME launch_mpirun
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/launch/launch_test.py
                 --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin
                 --work ${CMAKE_BINARY_DIR}/test_data/launch)
set_tests_properties(launch_mpirun PROPERTIES TIMEOUT 300)
