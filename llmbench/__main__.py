from llmbench.cli import app

app(prog_name="llmbench")
