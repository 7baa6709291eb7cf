import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.FileMetaData;

/**
 * Proves a byte-level concatenation without decoding its output. Parquet: the output's row groups are its inputs' row
 * groups, in input order, each column chunk at its place holding the very bytes of the input's chunk (compared byte
 * for byte) under the same description (type, codec, encodings and their page counts, value count, sizes, statistics,
 * the dictionary and first data page at the same place in the chunk, the same page index and bloom filter), each row
 * group the one a reader's split over its bytes selects. ORC: the output's stripes are its inputs' stripes, in input
 * order, byte for byte, with the same statistics, under a tail that decodes them alike (schema, compression, file and
 * writer version, row index stride, calendar, user metadata) and whose file statistics are the merge of the inputs'.
 * A reader decoding the output then decodes exactly what it decoded from the inputs, filtered reads included.
 * Compiled in the driver's JVM at first use, like `DriverBulk` (`spark_resources/bulk.py`): Janino's Java, no
 * lambdas, raw collections.
 */
public class CopyProof {
    private static final int BUFFER = 1 << 20;
    private final ObjectMapper mapper = new ObjectMapper();

    /** {"rows", "row_groups" (or stripes), "chunks" (column chunks or stripes compared), "bytes" (compared),
     * "output_bytes" (its length)}; or {"error": what differs, or why a file could not be read}. */
    public String prove(Configuration conf, String format, String output, String inputsJson) throws Exception {
        List inputs = (List) mapper.readValue(inputsJson, List.class);
        Map out = new LinkedHashMap();
        try {
            long[] totals = "parquet".equals(format) ? parquet(conf, output, inputs) : orc(conf, output, inputs);
            out.put("rows", Long.valueOf(totals[0]));
            out.put("row_groups", Long.valueOf(totals[1]));
            out.put("chunks", Long.valueOf(totals[2]));
            out.put("bytes", Long.valueOf(totals[3]));
            Path written = new Path(output);
            out.put("output_bytes", Long.valueOf(written.getFileSystem(conf).getFileStatus(written).getLen()));
        } catch (VirtualMachineError e) {
            throw e;
        } catch (Throwable e) {  // a corrupt footer can throw another Error: the proof fails, nothing else
            out.clear();
            out.put("error", e.getMessage() == null ? e.toString() : e.getMessage());
        }
        return mapper.writeValueAsString(out);
    }

    private static ParquetFileReader open(Configuration conf, String path) throws Exception {
        return ParquetFileReader.open(org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(new Path(path), conf));
    }

    private static FSDataInputStream stream(Configuration conf, String path) throws Exception {
        Path hadoop = new Path(path);
        return hadoop.getFileSystem(conf).open(hadoop);
    }

    /** Adds `reader` (of `path`) to `opened`, then a stream of `path` beside it: the stream. */
    private static FSDataInputStream alongside(List opened, java.io.Closeable reader, Configuration conf, String path)
        throws Exception {
        opened.add(reader);
        FSDataInputStream stream = stream(conf, path);
        opened.add(stream);
        return stream;
    }

    /** Closes what was opened, last first, each even when another fails; the first failure is thrown after. */
    private static void closeAll(List opened) throws Exception {
        Exception first = null;
        for (int i = opened.size() - 1; i >= 0; i--) {
            try {
                ((java.io.Closeable) opened.get(i)).close();
            } catch (Exception e) {
                first = first == null ? e : first;
            }
        }
        opened.clear();
        if (first != null) {
            throw first;
        }
    }

    /** Each row group of `output` is the one row group a reader's split over its bytes selects: a reader splitting
     * the file takes a row group where the middle of its extent as the footer records it falls. */
    private static void splitsSelect(Configuration conf, String output, List blocks) throws Exception {
        for (int b = 0; b < blocks.size(); b++) {
            BlockMetaData block = (BlockMetaData) blocks.get(b);
            long start = block.getStartingPos();
            org.apache.parquet.hadoop.metadata.ParquetMetadata ranged = ParquetFileReader.readFooter(conf, new Path(output),
                org.apache.parquet.format.converter.ParquetMetadataConverter.range(start, start + block.getCompressedSize()));
            List found = ranged.getBlocks();
            if (found.size() != 1 || ((BlockMetaData) found.get(0)).getStartingPos() != start) {
                throw new IllegalStateException("row group " + b + " is not the one a split over its bytes reads");
            }
        }
    }

    private static long[] parquet(Configuration conf, String output, List inputs) throws Exception {
        long[] totals = new long[4];  // rows, row groups, chunks, bytes
        List opened = new ArrayList();
        try {
            ParquetFileReader target = open(conf, output);
            FSDataInputStream written = alongside(opened, target, conf, output);
            FileMetaData meta = target.getFooter().getFileMetaData();
            List blocks = target.getFooter().getBlocks();
            int next = 0;
            for (int i = 0; i < inputs.size(); i++) {
                String input = (String) inputs.get(i);
                List inputOpened = new ArrayList();
                try {
                    ParquetFileReader source = open(conf, input);
                    FSDataInputStream read = alongside(inputOpened, source, conf, input);
                    FileMetaData inputMeta = source.getFooter().getFileMetaData();
                    if (!inputMeta.getSchema().equals(meta.getSchema())) {
                        throw new IllegalStateException("its schema is not that of input " + input);
                    }
                    Map kept = meta.getKeyValueMetaData();
                    Object[] keys = inputMeta.getKeyValueMetaData().keySet().toArray();
                    for (int k = 0; k < keys.length; k++) {
                        Object value = inputMeta.getKeyValueMetaData().get(keys[k]);
                        if (!value.equals(kept.get(keys[k]))) {
                            throw new IllegalStateException("key-value metadata " + keys[k] + " differs from " + input + "'s");
                        }
                    }
                    List sourceBlocks = source.getFooter().getBlocks();
                    for (int b = 0; b < sourceBlocks.size(); b++) {
                        if (next >= blocks.size()) {
                            throw new IllegalStateException("it has " + blocks.size() + " row groups, fewer than its inputs");
                        }
                        String where = "row group " + next + " (row group " + b + " of " + input + ")";
                        BlockMetaData copy = (BlockMetaData) blocks.get(next++);
                        block(source, read, (BlockMetaData) sourceBlocks.get(b), target, written, copy, where, totals);
                    }
                } finally {
                    closeAll(inputOpened);
                }
            }
            if (next != blocks.size()) {
                throw new IllegalStateException("it has " + blocks.size() + " row groups, its inputs " + next);
            }
            splitsSelect(conf, output, blocks);
        } finally {
            closeAll(opened);
        }
        return totals;
    }

    private static org.apache.orc.Reader orcReader(Configuration conf, String path) throws Exception {
        return org.apache.orc.OrcFile.createReader(new Path(path), org.apache.orc.OrcFile.readerOptions(conf));
    }

    private static long[] orc(Configuration conf, String output, List inputs) throws Exception {
        long[] totals = new long[4];  // rows, stripes, stripes again (the chunks compared), bytes
        List opened = new ArrayList();
        try {
            org.apache.orc.Reader target = orcReader(conf, output);
            FSDataInputStream written = alongside(opened, target, conf, output);
            if (target.getEncryptionVariants().length > 0) {
                throw new IllegalStateException("it has encrypted columns, which are not compared");
            }
            List stripes = target.getStripes();
            List stripeStats = target.getOrcProtoStripeStatistics();
            org.apache.orc.TypeDescription schema = target.getSchema();
            org.apache.orc.impl.ColumnStatisticsImpl[] merged = null;
            int next = 0;
            for (int i = 0; i < inputs.size(); i++) {
                String input = (String) inputs.get(i);
                List inputOpened = new ArrayList();
                try {
                    org.apache.orc.Reader source = orcReader(conf, input);
                    FSDataInputStream read = alongside(inputOpened, source, conf, input);
                    orcTail(source, target, input);
                    List fileStats = source.getOrcProtoFileStatistics();
                    if (merged == null) {
                        merged = new org.apache.orc.impl.ColumnStatisticsImpl[fileStats.size()];
                    }
                    for (int c = 0; c < fileStats.size(); c++) {
                        org.apache.orc.impl.ColumnStatisticsImpl stats = org.apache.orc.impl.ColumnStatisticsImpl.deserialize(
                            schema.findSubtype(c), (org.apache.orc.OrcProto.ColumnStatistics) fileStats.get(c));
                        if (merged[c] == null) {
                            merged[c] = stats;
                        } else {
                            merged[c].merge(stats);
                        }
                    }
                    List sourceStripes = source.getStripes();
                    List sourceStats = source.getOrcProtoStripeStatistics();
                    for (int s = 0; s < sourceStripes.size(); s++) {
                        if (next >= stripes.size()) {
                            throw new IllegalStateException("it has " + stripes.size() + " stripes, fewer than its inputs");
                        }
                        String where = "stripe " + next + " (stripe " + s + " of " + input + ")";
                        org.apache.orc.StripeInformation original = (org.apache.orc.StripeInformation) sourceStripes.get(s);
                        org.apache.orc.StripeInformation copy = (org.apache.orc.StripeInformation) stripes.get(next);
                        if (original.getNumberOfRows() != copy.getNumberOfRows()
                            || original.getIndexLength() != copy.getIndexLength()
                            || original.getDataLength() != copy.getDataLength()
                            || original.getFooterLength() != copy.getFooterLength()) {
                            throw new IllegalStateException(where + ": its rows or lengths differ from the input's");
                        }
                        if (!sourceStats.get(s).equals(stripeStats.get(next))) {
                            throw new IllegalStateException(where + ": its statistics differ from the input's");
                        }
                        sameBytes(read, original.getOffset(), written, copy.getOffset(), original.getLength(), where);
                        totals[0] += copy.getNumberOfRows();
                        totals[1]++;
                        totals[2]++;
                        totals[3] += original.getLength();
                        next++;
                    }
                } finally {
                    closeAll(inputOpened);
                }
            }
            if (next != stripes.size()) {
                throw new IllegalStateException("it has " + stripes.size() + " stripes, its inputs " + next);
            }
            List fileStats = target.getOrcProtoFileStatistics();
            if (merged == null || merged.length != fileStats.size()) {
                throw new IllegalStateException("its file statistics do not cover the columns of its inputs'");
            }
            for (int c = 0; c < merged.length; c++) {
                if (!merged[c].serialize().build().equals(fileStats.get(c))) {
                    throw new IllegalStateException("its file statistics of column " + c + " are not the merge of its inputs'");
                }
            }
        } finally {
            closeAll(opened);
        }
        return totals;
    }

    /** What an ORC reader decodes a copied stripe with, the same in the output's tail as in the input's. */
    private static void orcTail(org.apache.orc.Reader source, org.apache.orc.Reader target, String input) {
        String differs = null;
        if (source.getEncryptionVariants().length > 0) {
            differs = "encryption (not compared)";
        } else if (!source.getSchema().equals(target.getSchema())) {
            differs = "schema";
        } else if (source.getCompressionKind() != target.getCompressionKind()
                   || source.getCompressionSize() > target.getCompressionSize()) {
            differs = "compression";
        } else if (source.getFileVersion() != target.getFileVersion()
                   || source.getWriterVersion() != target.getWriterVersion()) {
            differs = "file or writer version";
        } else if (source.getRowIndexStride() != target.getRowIndexStride()) {
            differs = "row index stride";
        } else if (source.writerUsedProlepticGregorian() != target.writerUsedProlepticGregorian()) {
            differs = "calendar (proleptic Gregorian or hybrid)";
        } else {
            List keys = source.getMetadataKeys();
            for (int k = 0; k < keys.size() && differs == null; k++) {
                String key = (String) keys.get(k);
                if (!target.hasMetadataValue(key) || !source.getMetadataValue(key).equals(target.getMetadataValue(key))) {
                    differs = "user metadata " + key;
                }
            }
        }
        if (differs != null) {
            throw new IllegalStateException("its " + differs + " differs from that of input " + input);
        }
    }

    private static void block(ParquetFileReader source, FSDataInputStream read, BlockMetaData original,
                              ParquetFileReader target, FSDataInputStream written, BlockMetaData copy, String where,
                              long[] totals) throws Exception {
        if (original.getRowCount() != copy.getRowCount()) {
            throw new IllegalStateException(where + " holds " + copy.getRowCount() + " rows, the input's " + original.getRowCount());
        }
        List columns = original.getColumns();
        if (columns.size() != copy.getColumns().size()) {
            throw new IllegalStateException(where + " has " + copy.getColumns().size() + " column chunks, the input's " + columns.size());
        }
        for (int c = 0; c < columns.size(); c++) {  // in the same order: some readers take columns by position
            ColumnChunkMetaData chunk = (ColumnChunkMetaData) columns.get(c);
            ColumnChunkMetaData copied = (ColumnChunkMetaData) copy.getColumns().get(c);
            String column = where + ", column " + chunk.getPath().toDotString();
            if (!chunk.getPath().equals(copied.getPath())) {
                throw new IllegalStateException(column + " is not at its place");
            }
            described(chunk, copied, column);
            pageIndex(source, chunk, target, copied, column);
            bloomFilter(read, chunk, written, copied, column);
            sameBytes(read, chunk.getStartingPos(), written, copied.getStartingPos(), chunk.getTotalSize(), column);
            totals[2]++;
            totals[3] += chunk.getTotalSize();
        }
        totals[0] += copy.getRowCount();
        totals[1]++;
    }

    /** Everything a reader takes from a chunk's description, but where the chunk starts. */
    private static void described(ColumnChunkMetaData chunk, ColumnChunkMetaData copied, String column) {
        String differs = null;
        if (!chunk.getPrimitiveType().equals(copied.getPrimitiveType())) {
            differs = "type";
        } else if (chunk.getCodec() != copied.getCodec()) {
            differs = "codec";
        } else if (!chunk.getEncodings().equals(copied.getEncodings())) {
            differs = "encodings";
        } else if (chunk.getValueCount() != copied.getValueCount()) {
            differs = "value count";
        } else if (chunk.getTotalSize() != copied.getTotalSize()
                   || chunk.getTotalUncompressedSize() != copied.getTotalUncompressedSize()) {
            differs = "size";
        } else if (!chunk.getStatistics().equals(copied.getStatistics())) {
            differs = "statistics";
        } else if (!sameEncodingStats(chunk.getEncodingStats(), copied.getEncodingStats())) {
            differs = "encoding statistics";
        } else if (chunk.hasDictionaryPage() != copied.hasDictionaryPage()
                   || chunk.hasDictionaryPage()
                      && chunk.getDictionaryPageOffset() - chunk.getStartingPos()
                         != copied.getDictionaryPageOffset() - copied.getStartingPos()
                   || chunk.getFirstDataPageOffset() - chunk.getStartingPos()
                      != copied.getFirstDataPageOffset() - copied.getStartingPos()) {
            differs = "page offsets";
        }
        if (differs != null) {
            throw new IllegalStateException(column + ": its " + differs + " differ from the input's");
        }
    }

    /** The pages' encodings as the footer counts them (what a dictionary filter trusts to skip a row group). */
    private static boolean sameEncodingStats(org.apache.parquet.column.EncodingStats a,
                                             org.apache.parquet.column.EncodingStats b) {
        if (a == null || b == null) {
            return a == b;
        }
        if (!a.getDictionaryEncodings().equals(b.getDictionaryEncodings())
            || !a.getDataEncodings().equals(b.getDataEncodings()) || a.usesV2Pages() != b.usesV2Pages()) {
            return false;
        }
        Object[] encodings = org.apache.parquet.column.Encoding.values();
        for (int e = 0; e < encodings.length; e++) {
            org.apache.parquet.column.Encoding encoding = (org.apache.parquet.column.Encoding) encodings[e];
            if (a.getNumDictionaryPagesEncodedAs(encoding) != b.getNumDictionaryPagesEncodedAs(encoding)
                || a.getNumDataPagesEncodedAs(encoding) != b.getNumDataPagesEncodedAs(encoding)) {
                return false;
            }
        }
        return true;
    }

    /** The chunk's bloom filter, when it has one, byte for byte (a filter of unknown length is not compared: the
     * proof fails). */
    private static void bloomFilter(FSDataInputStream read, ColumnChunkMetaData chunk, FSDataInputStream written,
                                    ColumnChunkMetaData copied, String column) throws Exception {
        boolean has = chunk.getBloomFilterOffset() >= 0;
        if (has != copied.getBloomFilterOffset() >= 0) {
            throw new IllegalStateException(column + ": its bloom filter differs from the input's");
        }
        if (!has) {
            return;
        }
        if (chunk.getBloomFilterLength() <= 0 || chunk.getBloomFilterLength() != copied.getBloomFilterLength()) {
            throw new IllegalStateException(column + ": its bloom filter's length is unknown or differs from the input's");
        }
        sameBytes(read, chunk.getBloomFilterOffset(), written, copied.getBloomFilterOffset(), chunk.getBloomFilterLength(),
                  column + "'s bloom filter");
    }

    /** The page index (offset index and column index) the same but for where the chunk starts. */
    private static void pageIndex(ParquetFileReader source, ColumnChunkMetaData chunk, ParquetFileReader target,
                                  ColumnChunkMetaData copied, String column) throws Exception {
        org.apache.parquet.internal.column.columnindex.OffsetIndex offsets = source.readOffsetIndex(chunk);
        org.apache.parquet.internal.column.columnindex.OffsetIndex copiedOffsets = target.readOffsetIndex(copied);
        if ((offsets == null) != (copiedOffsets == null)) {
            throw new IllegalStateException(column + ": its offset index differs from the input's");
        }
        if (offsets != null) {
            boolean same = offsets.getPageCount() == copiedOffsets.getPageCount();
            for (int p = 0; same && p < offsets.getPageCount(); p++) {
                same = offsets.getOffset(p) - chunk.getStartingPos() == copiedOffsets.getOffset(p) - copied.getStartingPos()
                    && offsets.getCompressedPageSize(p) == copiedOffsets.getCompressedPageSize(p)
                    && offsets.getFirstRowIndex(p) == copiedOffsets.getFirstRowIndex(p);
            }
            if (!same) {
                throw new IllegalStateException(column + ": its offset index differs from the input's");
            }
        }
        org.apache.parquet.internal.column.columnindex.ColumnIndex index = source.readColumnIndex(chunk);
        org.apache.parquet.internal.column.columnindex.ColumnIndex copiedIndex = target.readColumnIndex(copied);
        if ((index == null) != (copiedIndex == null)
            || index != null && !(index.getBoundaryOrder() == copiedIndex.getBoundaryOrder()
                                  && index.getNullPages().equals(copiedIndex.getNullPages())
                                  && String.valueOf(index.getNullCounts()).equals(String.valueOf(copiedIndex.getNullCounts()))
                                  && index.getMinValues().equals(copiedIndex.getMinValues())
                                  && index.getMaxValues().equals(copiedIndex.getMaxValues()))) {
            throw new IllegalStateException(column + ": its column index differs from the input's");
        }
    }

    /** Compares `length` bytes of both files, one buffer at a time; fails naming the first byte that differs. */
    private static void sameBytes(FSDataInputStream read, long from, FSDataInputStream written, long to, long length,
                                  String column) throws Exception {
        byte[] original = new byte[(int) Math.min(BUFFER, length)];
        byte[] copied = new byte[original.length];
        for (long done = 0; done < length; ) {
            int size = (int) Math.min(original.length, length - done);
            read.readFully(from + done, original, 0, size);
            written.readFully(to + done, copied, 0, size);
            int mismatch = Arrays.mismatch(original, 0, size, copied, 0, size);
            if (mismatch >= 0) {
                throw new IllegalStateException(column + ": its byte " + (done + mismatch) + " differs from the input's");
            }
            done += size;
        }
    }
}
