# PyTorch steps with no code change (interpose/python/autostep): the rule and the torch hooks in Python
# (test_autostep.py), run by DETNCCL_TEST_PYTHON, a Python with Debian's python3-torch; without torch it fails,
# saying to run scripts/install-deps.sh.
set(DETNCCL_TEST_PYTHON /usr/bin/python3 CACHE FILEPATH "The Python, with PyTorch, that runs the PyTorch step tests")
set(autostep_dir ${PROJECT_BINARY_DIR}/share/detnccl/python/autostep)  # the build tree's copy (interpose/)
add_test(NAME autostep_python COMMAND ${DETNCCL_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_autostep.py ${autostep_dir})
set_tests_properties(autostep_python PROPERTIES TIMEOUT 120 ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

