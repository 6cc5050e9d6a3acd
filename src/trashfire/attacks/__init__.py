"""The attack stage's library: the attack engine and its loops (`engine`, `apgd`, `fab`,
`square`, `standard`), the campaign over the attack grid (`campaign`), ART's attacks
(`art_attacks`), and the light `spec`, `store`, `versions` and `checks` that the validator
and the table stages read without loading torch or ART. Importing this package loads
nothing heavy: import the module you need."""
