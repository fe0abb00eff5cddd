from raylc.cli import main

main()
