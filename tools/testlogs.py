"""Reading what a test wrote to TEST_UNDECLARED_OUTPUTS_DIR, from bazel-testlogs/<target>/."""
import os
import zipfile


def read_output(target_dir: str, name: str) -> str | None:
    """The text of the undeclared output `name`: from test.outputs/ as the test left it, or from
    test.outputs/outputs.zip where Bazel zipped the outputs; None if the test wrote no such file."""
    outputs = os.path.join(target_dir, "test.outputs")
    path = os.path.join(outputs, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    zipped = os.path.join(outputs, "outputs.zip")
    if os.path.exists(zipped):
        with zipfile.ZipFile(zipped) as z:
            if name in z.namelist():
                return z.read(name).decode("utf-8")
    return None
