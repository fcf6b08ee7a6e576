// placeholder: implemented by the foundation work
