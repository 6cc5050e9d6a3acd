"""The attack stage's library: the attack engine (`engine`), its torch loops (declared in
`loops`, a module each; their arithmetic in `gradient`, `deepfool`, `apgd`, `fab`, `square`,
`minimal_norm` and `standard`), the campaign over the attack grid (`campaign`), ART's attacks
(`art_attacks`), and the light `spec`, `store`, `loops` and `checks` that the validator and
the table stages read without loading torch or ART. Importing this package loads
nothing heavy: import the module you need."""
