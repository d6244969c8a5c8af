"""``warptd doctor``: is warptd right on this node, and what does it cost here? The checks
(:mod:`~warptd.doctor.examine`), what they found (:mod:`~warptd.doctor.report`), and the text a
person reads (:mod:`~warptd.doctor.text`)."""
