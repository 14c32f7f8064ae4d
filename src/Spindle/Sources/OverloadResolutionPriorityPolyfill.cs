#if !NET9_0_OR_GREATER
namespace System.Runtime.CompilerServices;

/// <summary>
/// net8.0 and netstandard2.1 stand-in for .NET 9's attribute that ranks an overload above others of its type: C# 13 and
/// later compilers recognise it by name, whichever assembly declares it, so the tuple combinators' ranking holds for users
/// of every build. Older compilers (C# 12 and before, Unity's) ignore it.
/// </summary>
[AttributeUsage(AttributeTargets.Method | AttributeTargets.Constructor | AttributeTargets.Property, Inherited = false)]
internal sealed class OverloadResolutionPriorityAttribute : Attribute
{
    /// <summary>Ranks the member: a higher priority wins over lower ones.</summary>
    public OverloadResolutionPriorityAttribute(int priority) => Priority = priority;

    /// <summary>The member's rank; 0 when the attribute is absent.</summary>
    public int Priority { get; }
}
#endif
