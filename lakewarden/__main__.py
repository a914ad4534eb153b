from lakewarden.cli import main

main()
