"""The results directory's contents: the Parquet store of rows and history, the rows a pack writes,
the stored selection and test-set predictions beside them, the results lock and the
object-store lease."""
