"""What a REALM query hides: salient and random spans for the masked-LM reader, spans as targets for the causal reader."""
