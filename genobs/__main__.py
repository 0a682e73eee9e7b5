from genobs.cli import main

main()
