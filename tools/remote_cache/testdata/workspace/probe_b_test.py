assert "sleep" + "wake" == "sleepwake"
