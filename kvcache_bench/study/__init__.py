"""What a study is: its cells, the checks that refuse a cell, and the prompts each cell builds."""
