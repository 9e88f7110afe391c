"""The data pipeline (DL4J's ``org.nd4j.linalg.dataset``): `DataSet` and `MultiDataSet`, the
iterator protocol and its iterators, CSV, sequence and image records, normalizers, and async
prefetch on a circular workspace. See ``docs/data.md``.
"""
from ndws.data.async_iterators import AsyncDataSetIterator, AsyncMultiDataSetIterator
from ndws.data.dataset import DataSet, MultiDataSet, SplitTestAndTrain
from ndws.data.images import ImageRecordReader, ParentPathLabelGenerator
from ndws.data.iterators import (
    ArrayDataSetIterator,
    ArrayMultiDataSetIterator,
    AsyncShieldDataSetIterator,
    AsyncShieldMultiDataSetIterator,
    DataSetIterator,
    ExistingDataSetIterator,
    ExistingMultiDataSetIterator,
    ListDataSetIterator,
    ListMultiDataSetIterator,
    MultiDataSetIterator,
    WorkspacesShieldDataSetIterator,
    as_data_set_iterator,
    as_multi_data_set_iterator,
)
from ndws.data.normalizers import (
    ImagePreProcessingScaler,
    NormalizerMinMaxScaler,
    NormalizerStandardize,
)
from ndws.data.records import (
    CSVRecordReader,
    OneHot,
    RecordReader,
    RecordReaderDataSetIterator,
    RecordReaderMultiDataSetIterator,
)
from ndws.data.sequences import (
    AlignmentMode,
    CSVSequenceRecordReader,
    SequenceRecordReaderDataSetIterator,
)

__all__ = [
    "DataSet", "MultiDataSet", "SplitTestAndTrain",
    "DataSetIterator", "MultiDataSetIterator", "ArrayDataSetIterator", "ArrayMultiDataSetIterator",
    "ListDataSetIterator", "ListMultiDataSetIterator", "ExistingDataSetIterator",
    "ExistingMultiDataSetIterator", "AsyncShieldDataSetIterator",
    "AsyncShieldMultiDataSetIterator", "WorkspacesShieldDataSetIterator",
    "as_data_set_iterator", "as_multi_data_set_iterator",
    "AsyncDataSetIterator", "AsyncMultiDataSetIterator",
    "RecordReader", "CSVRecordReader", "RecordReaderDataSetIterator",
    "RecordReaderMultiDataSetIterator", "OneHot", "ImageRecordReader", "ParentPathLabelGenerator",
    "CSVSequenceRecordReader", "SequenceRecordReaderDataSetIterator", "AlignmentMode",
    "NormalizerStandardize", "NormalizerMinMaxScaler", "ImagePreProcessingScaler",
]
