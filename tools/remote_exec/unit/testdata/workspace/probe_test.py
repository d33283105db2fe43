import os

# The stand-in workers add SLEEPWAKE_EXECUTOR to every action they run; remote_exec_test.py reads this
# line back from test.log to tell which pool ran the test.
print("executor:", os.environ.get("SLEEPWAKE_EXECUTOR", "<none: not run by a stand-in worker>"))
