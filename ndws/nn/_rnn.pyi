# Typing stub for ndws.nn._rnn: the time loops, whose public functions are ndws.nn._rnn_entries'
# (re-exported by ndws.nn.functional); nothing public here.
