"""Model families markbase runs. Each family package holds its config parser and weight table."""
